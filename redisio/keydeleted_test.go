package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/redisio"
)

// TestTryAfterKeyDeletedLoss: once a holder has been told Lost because its
// key was deleted, its own next TryLock (or TryRLock) finds the name free:
// the lost hold has left the queue before the Lost. (It used to leave it
// afterwards, so such a try could find its own dead hold ahead and fail
// with ErrLockTaken now and then.)
func TestTryAfterKeyDeletedLoss(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	const rounds = 10 // the old code failed within a few
	// The session must outlive every round: with appendfsync always, one
	// refresh can wait on a disk that CI's other packages keep busy, and a
	// TTL of 1 s was lost that way. A deleted key's Lost comes with the
	// next refresh, a third of the TTL later.
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*rounds*ttl)
	defer cancel()
	type try func(context.Context) (key string, err error)
	for _, c := range []struct {
		kind string
		make func(t *testing.T, name string) (try, func() <-chan primitives.Event)
	}{
		{"lock", func(t *testing.T, name string) (try, func() <-chan primitives.Event) {
			l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(newClient(t, r), name, redisio.WithTTL(ttl)))
			return func(ctx context.Context) (string, error) {
				g, err := l.TryLock(ctx)
				return g.Key, err
			}, func() <-chan primitives.Event { return l.Subscribe(ctx) }
		}},
		{"rwlock", func(t *testing.T, name string) (try, func() <-chan primitives.Event) {
			l := testkit.ClosedAtEnd[rwlock.Service](t)(redisio.NewRWLock(newClient(t, r), name, redisio.WithTTL(ttl)))
			n := 0
			return func(ctx context.Context) (string, error) {
				acq := l.TryLock
				if n++; n%2 == 0 {
					acq = l.TryRLock
				}
				g, err := acq(ctx)
				return g.Key, err
			}, func() <-chan primitives.Event { return l.Subscribe(ctx) }
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			try, subscribe := c.make(t, "try-after-loss-"+c.kind)
			events := subscribe()
			key, err := try(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range rounds {
				if err := admin.Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
				testkit.NextOf[primitives.Lost](t, events, 10*time.Second)
				if key, err = try(ctx); err != nil {
					t.Fatalf("round %d: try right after the Lost of a deleted key: %v", i, err)
				}
			}
		})
	}
}
