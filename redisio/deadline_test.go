package redisio_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/redisio"
)

// TestShortDeadlines: waiters giving up after 0.5 to 3 ms while the name
// changes hands get either a grant or an error wrapping their context's
// own error, never another (a Redis timeout, a client's deadline error),
// and leave no key behind: once every call has returned and every grant
// is released, the name's queue is empty and no hold key is left.
func TestShortDeadlines(t *testing.T) { shortDeadlines(t, false) }

// TestShortDeadlinesSlowReplies: the same on clients whose read timeout
// (1 ms) Redis's replies overrun now and then, so that a script's reply
// can be lost while its caller's deadline passes. A call whose context
// ended still gets an error wrapping the context's own, and what a lost
// reply leaves is gone within the TTL.
func TestShortDeadlinesSlowReplies(t *testing.T) { shortDeadlines(t, true) }

func shortDeadlines(t *testing.T, slow bool) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	const ttl = 3 * time.Second
	for _, kind := range []string{"lock", "rwlock", "election"} {
		t.Run(kind, func(t *testing.T) {
			name := "short-" + kind
			const sessions, perSession, spell = 3, 4, 2 * time.Second
			type call func(context.Context) (release func(context.Context) error, err error)
			var calls []call
			var closers []func() error
			for range sessions {
				cli := newClient(t, r)
				if slow {
					cli = redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 4, ReadTimeout: time.Millisecond})
					t.Cleanup(func() { cli.Close() })
				}
				s, err := redisio.NewSession(cli, redisio.WithTTL(ttl))
				for try := 0; err != nil && slow && try < 50; try++ { // a reply overran the read timeout
					s, err = redisio.NewSession(cli, redisio.WithTTL(ttl))
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				for i := range perSession {
					switch kind {
					case "lock":
						l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
						if err != nil {
							t.Fatal(err)
						}
						closers = append(closers, l.Close)
						calls = append(calls, func(ctx context.Context) (func(context.Context) error, error) {
							g, err := l.Lock(ctx)
							return func(ctx context.Context) error { return l.Release(ctx, g) }, err
						})
					case "rwlock":
						l, err := redisio.NewRWLock(cli, name, redisio.WithSession(s))
						if err != nil {
							t.Fatal(err)
						}
						closers = append(closers, l.Close)
						acq := l.Lock
						if i%2 == 0 {
							acq = l.RLock
						}
						calls = append(calls, func(ctx context.Context) (func(context.Context) error, error) {
							g, err := acq(ctx)
							return func(ctx context.Context) error { return l.Release(ctx, g) }, err
						})
					case "election":
						e, err := redisio.NewElection(cli, name, redisio.WithSession(s))
						if err != nil {
							t.Fatal(err)
						}
						closers = append(closers, e.Close)
						calls = append(calls, func(ctx context.Context) (func(context.Context) error, error) {
							err := e.Campaign(ctx, "v")
							return e.Resign, err
						})
					}
				}
			}
			stop := time.Now().Add(spell)
			var wg sync.WaitGroup
			var mu sync.Mutex
			grants, gaveUp, failed := 0, 0, 0
			for i, c := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						// A quarter wait for the name in turn and let go at
						// once; the others give up after 0.5 to 3 ms.
						d := 10 * time.Second
						if i%4 != 0 {
							d = 500*time.Microsecond + rand.N(2500*time.Microsecond)
						}
						ctx, cancel := context.WithTimeout(context.Background(), d)
						release, err := c(ctx)
						ctxErr := ctx.Err()
						cancel()
						if err != nil && ctxErr == nil && slow {
							mu.Lock()
							failed++ // a reply overran the client's read timeout
							mu.Unlock()
							continue
						}
						if err != nil {
							if ctxErr == nil || !errors.Is(err, ctxErr) {
								t.Errorf("call with a short deadline (ctx: %v): %v (%T), want an error wrapping the context's own", ctxErr, err, err)
								return
							}
							mu.Lock()
							gaveUp++
							mu.Unlock()
							continue
						}
						mu.Lock()
						grants++
						mu.Unlock()
						for try := 0; ; try++ {
							err := release(context.Background())
							if err == nil || (slow && try < 50 && !notHeld(err)) {
								if err == nil {
									break
								}
								continue // a reply lost: the release is tried again
							}
							if !slow || !notHeld(err) { // slow: a retried release finds its hold gone
								t.Errorf("release: %v", err)
								return
							}
							break
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d grants, %d calls gave up, %d failed with their context alive", grants, gaveUp, failed)
			// Without slow replies nothing is left once the calls returned;
			// with them, what a lost reply left expires within two TTLs (a
			// granted hold's key, then its tombstone), and the next look at
			// the queue (a probe's try) removes it.
			deadline := time.Now()
			if slow {
				deadline = deadline.Add(2*ttl + time.Second)
			}
			probe := probeOf(t, r, kind, name)
			for {
				if slow {
					probe()
				}
				left := leftBehind(t, admin, name)
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("left behind after every call returned: %v", left)
				}
				time.Sleep(50 * time.Millisecond) // polling interval
			}
			for _, c := range closers {
				c()
			}
		})
	}
}

// notHeld reports whether err says that a release found its hold gone.
func notHeld(err error) bool {
	return errors.Is(err, lock.ErrNotHeld) || errors.Is(err, rwlock.ErrNotHeld) || errors.Is(err, election.ErrNotLeader)
}

// leftBehind lists what of name's holds is left in Redis: queued holds,
// hold keys, records of granted holds.
func leftBehind(t *testing.T, admin *redis.Client, name string) []string {
	t.Helper()
	ctx := context.Background()
	var left []string
	if q, err := admin.ZRange(ctx, name+"/queue", 0, -1).Result(); err != nil {
		t.Fatal(err)
	} else if len(q) > 0 {
		left = append(left, fmt.Sprintf("queue %v", q))
	}
	keys, err := admin.Keys(ctx, name+"/*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		switch k {
		case name + "/seq", name + "/rtok", name + "/queue":
		case name + "/held":
			if f, err := admin.HKeys(ctx, k).Result(); err != nil || len(f) != 1 {
				left = append(left, fmt.Sprintf("%s fields %v (%v)", k, f, err))
			}
		default:
			left = append(left, k)
		}
	}
	return left
}

// probeOf returns a try at name of a primitive of kind, released at once
// if it got it: a look at the queue that removes its dead holds.
func probeOf(t *testing.T, r *testserver.Redis, kind, name string) func() {
	ctx := context.Background()
	cli := newClient(t, r)
	switch kind {
	case "lock":
		l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name))
		return func() {
			if _, err := l.TryLock(ctx); err == nil {
				l.Unlock(ctx)
			}
		}
	case "rwlock":
		l := testkit.ClosedAtEnd[rwlock.Service](t)(redisio.NewRWLock(cli, name))
		return func() {
			if _, err := l.TryRLock(ctx); err == nil {
				l.RUnlock(ctx)
			}
		}
	default:
		e := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name))
		return func() {
			if _, err := e.Leader(ctx); err != nil && !errors.Is(err, election.ErrNoLeader) {
				t.Errorf("Leader: %v", err)
			}
		}
	}
}
