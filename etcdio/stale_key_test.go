package etcdio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/testkit"
)

// A key of a service's own that lands after the service gave its name up
// (the write of an attempt whose reply was lost, applied late) sits under
// the service's live lease, ahead of its next key: the service deletes it
// rather than wait behind itself until its session ends.
func TestOwnLateKeyAheadIsDeleted(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 20*time.Second)
	cli := newClient(t)
	n := prefixOf(t)
	l := newLock(t, cli, n)
	g := mustLock(t, l)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The late write: a name of this service's, under its lease.
	late := g.Key[:strings.LastIndexByte(g.Key, '.')+1] + "7"
	if _, err := cli.Put(ctx, late, "", clientv3.WithLease(clientv3.LeaseID(g.LeaseID))); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g2, err := l.Lock(lctx)
	if err != nil {
		t.Fatalf("Lock behind the service's own late key %s: %v", late, err)
	}
	if g2.Token() <= g.Token() {
		t.Fatalf("token %d, not above the previous grant's %d", g2.Token(), g.Token())
	}
	if resp, err := cli.Get(ctx, late); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the late key is still there (%v)", err)
	}
}
