package etcdio

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
)

// A party whose key is gone is not in a round, whatever ready says: its
// withdrawal finds the key gone and a later ready, and reports it out.
func TestDoubleBarrierWithdrawOfGoneKeyIsOut(t *testing.T) {
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "/test/" + t.Name()
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	b, err := NewDoubleBarrier(cli, prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d := b.(*doubleBarrier)
	key := prefix + "/waiters/gone"
	put, err := cli.Put(ctx, key, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, key); err != nil { // by someone else
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"/ready", ""); err != nil { // a round of others
		t.Fatal(err)
	}
	if in, _ := d.withdraw(ctx, key, put.Header.Revision); in {
		t.Fatal("a party whose key is gone was reported in the round that others completed")
	}
}
