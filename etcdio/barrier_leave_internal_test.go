package etcdio

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
)

// A Leave that finds its party's key deleted by someone else settles the
// key as every other path that drops it does: an Enter whose put was
// repeated marked the key unsure (a late landing of that put is deleted),
// and the Leave clears the mark with the key.
func TestLeaveAfterKeyDeletedSettlesUnsureKey(t *testing.T) {
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "/test/" + t.Name()
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	a, err := NewDoubleBarrier(etcdtest.NewClient(t), prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewDoubleBarrier(etcdtest.NewClient(t), prefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	done := make(chan error, 1)
	go func() { done <- a.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "a's key", func() bool {
		resp, err := cli.Get(ctx, prefix+"/waiters/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 1
	})
	if err := b.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d := b.(*doubleBarrier)
	key := d.mine.key
	d.s.markUnsure(key) // as an Enter whose put was repeated does
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	left := make(chan error, 1)
	go func() { left <- b.Leave(ctx) }()
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-left; err != nil {
		t.Fatal(err)
	}
	if d.s.takeUnsure(key) {
		t.Fatalf("unsure key %s still marked after the Leave that found it deleted", key)
	}
}
