package redisio_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/redisio"
)

// TestBarriersShareNameWithLocks: a barrier, a double barrier, a lock, an
// rwlock and an election on one name keep apart: the barrier held and
// parties entered do not hold back the lock or the election, the keys of
// each are their own, and once the barriers are done only the lock
// layout's keys are left.
func TestBarriersShareNameWithLocks(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, r)
	const name = "shared"
	b, err := redisio.NewBarrier(newClient(t, r), name)
	if err != nil {
		t.Fatal(err)
	}
	d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 1))
	if err := b.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	l := lockOn(t, r, name)
	if _, err := l.TryLock(ctx); err != nil {
		t.Fatalf("TryLock with the barriers on its name: %v", err)
	}
	keys := nameKeys(t, admin, name)
	for _, want := range []string{name + "/barrier", name + "/dbarrier", name + "/dbarrier.parties", name + "/seq", name + "/queue"} {
		if !slices.Contains(keys, want) {
			t.Errorf("keys %v lack %s", keys, want)
		}
	}
	if err := d.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, k := range nameKeys(t, admin, name) {
		if k != name+"/seq" && k != name+"/held" {
			t.Errorf("key %s left after the barriers and the lock are done", k)
		}
	}
}

// TestDoubleBarrierCountMismatch: a party given another count than the
// round's is refused with an error wrapping primitives.ErrInvalidArgument
// and not counted.
func TestDoubleBarrierCountMismatch(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, r)
	const name = "mismatch"
	first := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	other := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 3))
	second := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	entered := make(chan error, 1)
	go func() { entered <- first.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the first party's key", func() bool {
		return len(nameKeys(t, admin, name)) == 3
	})
	if err := other.Enter(ctx); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Enter with another count: %v, want an error wrapping ErrInvalidArgument", err)
	}
	if err := second.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-entered; err != nil {
		t.Fatal(err)
	}
}

// TestDoubleBarrierLostWhileEntering: a party whose session is lost while
// it waits in Enter fails with an error wrapping primitives.ErrLost, is
// not counted, and its key is gone.
func TestDoubleBarrierLostWhileEntering(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, r)
	const name = "lostenter"
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli, redisio.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(cli, name, 2, redisio.WithSession(s)))
	entered := make(chan error, 1)
	go func() { entered <- p.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the party's key", func() bool { return len(nameKeys(t, admin, name)) == 3 })
	if err := admin.Del(ctx, s.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-entered; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Enter of a lost party: %v, want an error wrapping ErrLost", err)
	}
	testkit.Eventually(t, 10*time.Second, "the lost party's keys to go", func() bool { return len(nameKeys(t, admin, name)) == 0 })
}

// TestBarriersAcrossRestartWithAOF: with appendfsync always a restart
// keeps a held barrier held (a Wait begun before it still blocks, and
// returns at the Release after it), and keeps a double barrier's party
// counted while its session's deadline has not passed.
func TestBarriersAcrossRestartWithAOF(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "restart"
	b, err := redisio.NewBarrier(newClient(t, r), name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := redisio.NewBarrier(newClient(t, r), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- w.Wait(ctx) }()
	first := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2, redisio.WithTTL(10*time.Second)))
	entered := make(chan error, 1)
	go func() { entered <- first.Enter(ctx) }()
	admin := newClient(t, r)
	testkit.Eventually(t, 10*time.Second, "the first party's key", func() bool { return len(nameKeys(t, admin, name)) == 4 })
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	// The Wait is still blocked once Redis answers again (its re-checks
	// find the key), until the Release.
	sctx, scancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer scancel()
	if err := w.Wait(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Wait after the restart: %v, want DeadlineExceeded (still held)", err)
	}
	select {
	case err := <-waited:
		t.Fatalf("the Wait begun before the restart returned while held: %v", err)
	default:
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	second := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(newClient(t, r), name, 2))
	if err := second.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-entered; err != nil {
		t.Fatalf("the first party's Enter across the restart: %v", err)
	}
}

// A Release on a Redis that no longer answers returns an error, even on a
// context that never ends: its repeats are bounded (a barrier has no
// session to end them).
func TestBarrierReleaseGivesUp(t *testing.T) {
	t.Parallel()
	px, cli := proxied(t, testserver.StartRedis(t), redis.Options{MaxRetries: -1})
	b, err := redisio.NewBarrier(cli, "barrier/gives-up")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(context.Background()); err != nil {
		t.Fatal(err)
	}
	px.Close()
	done := make(chan error, 1)
	go func() { done <- b.Release(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Release succeeded with Redis gone")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Release still repeating 30 s after Redis went away")
	}
}

// TestBarrierReleaseThenHoldFreesWaiters: Release lets every Wait under
// way return, also when the barrier is held again right after it (a
// coordinator's next phase): a waiter woken by the release's message does
// not look again and wait for the next Release. The test releases (the
// key's deletion and its message) and holds in one transaction, so that
// every waiter's look after its wakeup finds the barrier held.
func TestBarrierReleaseThenHoldFreesWaiters(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name, waiters = "barrier/release-hold", 4
	holder, err := redisio.NewBarrier(newClient(t, r), name)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, waiters)
	for range waiters {
		w, err := redisio.NewBarrier(newClient(t, r), name)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- w.Wait(ctx) }()
	}
	testkit.Eventually(t, 10*time.Second, "every waiter subscribed", func() bool {
		n, err := admin.PubSubNumSub(ctx, name+"/barrier.wake").Result()
		return err == nil && n[name+"/barrier.wake"] == waiters
	})
	id, err := admin.Get(ctx, name+"/barrier").Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, name+"/barrier")
		p.Publish(ctx, name+"/barrier.wake", "")
		p.Set(ctx, name+"/barrier", id, 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	for i := range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d Waits still wait 10 s after the Release they waited for (the barrier was held again right after it)", waiters-i, waiters)
		}
	}
}
