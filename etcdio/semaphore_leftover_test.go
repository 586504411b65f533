package etcdio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// TestTryAcquireBesideALeftoverClaim: the one slot is claimed by a claim an
// older disco left behind (Close on a shared session), naming a queue key
// that no longer exists, on a lease that lives. TryAcquire does not wait
// for it: it returns ErrNoPermit at once, leaving nothing behind, until
// the claim has been seen for as long as an Acquire waits before taking
// such a claim over (a TTL of its lease); then it takes it over. Before,
// each TryAcquire waited that long itself, past a ctx of a few seconds.
func TestTryAcquireBesideALeftoverClaim(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 30*time.Second)
	cli, admin := newClient(t), newClient(t)
	prefix := prefixOf(t)
	defer admin.Delete(context.Background(), prefix, clientv3.WithPrefix())
	sem, err := etcdio.NewSemaphore(cli, prefix, 1, etcdio.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	// The older disco's session, still alive.
	old, err := admin.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	if _, err := admin.KeepAlive(kctx, old.ID); err != nil {
		t.Fatal(err)
	}
	defer admin.Revoke(context.Background(), old.ID)
	if _, err := admin.Put(ctx, prefix+"/slot/0", prefix+"/q/1-1.1@2", clientv3.WithLease(old.ID)); err != nil {
		t.Fatal(err)
	}
	tryAcquire := func() (semaphore.Grant, time.Duration, error) {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		start := time.Now()
		g, err := sem.TryAcquire(tctx)
		return g, time.Since(start), err
	}
	_, took, err := tryAcquire()
	if !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire beside a leftover claim: %v after %v, want ErrNoPermit at once", err, took)
	}
	if n := countKeys(t, admin, prefix+"/q"); n != 0 {
		t.Fatalf("%d queue keys left by TryAcquire", n)
	}
	var g semaphore.Grant
	testkit.Eventually(t, 20*time.Second, "TryAcquire takes the leftover claim over", func() bool {
		g, took, err = tryAcquire()
		if err != nil && !errors.Is(err, semaphore.ErrNoPermit) {
			t.Fatalf("TryAcquire: %v after %v", err, took)
		}
		return err == nil
	})
	if g.Slot != 0 {
		t.Fatalf("took slot %d over, want 0", g.Slot)
	}
	if err := sem.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}
