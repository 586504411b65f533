package redisio_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// closer is a Session or a primitive: what the test closes.
type closer interface {
	Close() error
	Err() error
}

// TestCloseWithinTTLInOutage: Close, of a Session and of every primitive,
// returns within the session's TTL while Redis does not answer (the
// client's timeouts at go-redis's defaults, longer than the TTL), with an
// error wrapping context.DeadlineExceeded that says it gave up, and leaves
// no goroutine behind; the acquisition it gave up on returns an error
// wrapping primitives.ErrClosed. The test allows the bound twice over
// again, for a loaded machine. Each step of Close had its own bound (10 s
// for an acquisition under way, 5 s for the deletes, each request on top
// of it the client's ReadTimeout), so Close took 10 s and more, and said
// nothing of what it left; a double barrier's Enter cut short returned
// the request's error, not ErrClosed.
func TestCloseWithinTTLInOutage(t *testing.T) {
	const ttl = 2 * time.Second
	// bound is the documented bound, the TTL, and twice as much again for
	// a loaded machine.
	const bound = 3 * ttl
	type acquire func(ctx context.Context) error
	type kind struct {
		name string
		// open makes the primitive on cli with opts, and returns what
		// starts an acquisition on it.
		open func(cli *redis.Client, name string, opts ...redisio.Option) (closer, acquire, error)
	}
	kinds := []kind{
		{"lock", func(cli *redis.Client, name string, opts ...redisio.Option) (closer, acquire, error) {
			l, err := redisio.NewLock(cli, name, opts...)
			if err != nil {
				return nil, nil, err
			}
			return l, func(ctx context.Context) error { _, err := l.Lock(ctx); return err }, nil
		}},
		{"rwlock", func(cli *redis.Client, name string, opts ...redisio.Option) (closer, acquire, error) {
			l, err := redisio.NewRWLock(cli, name, opts...)
			if err != nil {
				return nil, nil, err
			}
			// A writer's Lock.
			return l, func(ctx context.Context) error { _, err := l.Lock(ctx); return err }, nil
		}},
		{"election", func(cli *redis.Client, name string, opts ...redisio.Option) (closer, acquire, error) {
			e, err := redisio.NewElection(cli, name, opts...)
			if err != nil {
				return nil, nil, err
			}
			return e, func(ctx context.Context) error { return e.Campaign(ctx, "v") }, nil
		}},
		{"semaphore", func(cli *redis.Client, name string, opts ...redisio.Option) (closer, acquire, error) {
			m, err := redisio.NewSemaphore(cli, name, 2, opts...)
			if err != nil {
				return nil, nil, err
			}
			return m, func(ctx context.Context) error { _, err := m.Acquire(ctx); return err }, nil
		}},
		{"double barrier", func(cli *redis.Client, name string, opts ...redisio.Option) (closer, acquire, error) {
			d, err := redisio.NewDoubleBarrier(cli, name, 2, opts...)
			if err != nil {
				return nil, nil, err
			}
			return d, d.Enter, nil
		}},
	}

	// outage runs a case: made opens what the case closes on cli (through
	// a proxy, the client's options at their defaults) with a session of
	// the TTL, holding or not, and returns it and the acquisition on name
	// to start once Redis stops answering (nil: none), which Close then
	// finds under way.
	outage := func(t *testing.T, name string, made func(t *testing.T, cli *redis.Client) (closer, acquire)) {
		r := testserver.StartRedis(t)
		testkit.NoLeaks(t)
		px, cli := proxied(t, r, redis.Options{})
		c, acq := made(t, cli)
		px.BlackholeTx()
		px.BlackholeRx()
		defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
		// The scripts sent into the dark that name a key of name's (seen
		// on the wire: with the client's timeouts over the TTL, redisio
		// sends them on a clone of it, which runs none of its hooks).
		var sent struct{ n atomic.Int64 }
		px.WatchTx(func(b []byte) {
			if (bytes.Contains(b, []byte("\r\nevalsha\r\n")) || bytes.Contains(b, []byte("\r\neval\r\n"))) &&
				bytes.Contains(b, []byte(name+"/")) {
				sent.n.Add(1)
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		acquired := make(chan error, 1)
		if acq != nil {
			go func() { acquired <- acq(ctx) }()
			testkit.Eventually(t, 10*time.Second, "the acquisition's script sent", func() bool { return sent.n.Load() >= 1 })
		} else {
			acquired <- nil
		}
		err := closeWithin(t, "Close", c, ttl, bound)
		var aerr error
		select {
		case aerr = <-acquired:
		case <-time.After(30 * time.Second):
			t.Fatalf("the acquisition did not return within 30s of Close")
		}
		switch {
		case errors.Is(aerr, primitives.ErrLost) || errors.Is(c.Err(), primitives.ErrLost):
			// The session was lost before Close: nothing was left to give
			// up on.
			t.Logf("the session was lost before Close (%v)", aerr)
		default:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close: %v, want an error wrapping context.DeadlineExceeded: it gave up", err)
			}
			if acq != nil && !errors.Is(aerr, primitives.ErrClosed) {
				t.Errorf("the acquisition Close gave up on: %v, want an error wrapping primitives.ErrClosed", aerr)
			}
		}
	}

	t.Run("session", func(t *testing.T) {
		const name = "close-bound/session"
		outage(t, name, func(t *testing.T, cli *redis.Client) (closer, acquire) {
			s, _ := heldOnSession(t, cli, ttl, name+"-held")
			l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			return s, func(ctx context.Context) error { _, err := l.Lock(ctx); return err }
		})
	})
	t.Run("held lock", func(t *testing.T) {
		const name = "close-bound/held"
		outage(t, name, func(t *testing.T, cli *redis.Client) (closer, acquire) {
			l, err := redisio.NewLock(cli, name, redisio.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Lock(context.Background()); err != nil {
				t.Fatal(err)
			}
			return l, nil // no acquisition under way
		})
	})
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			name := "close-bound/" + strings.ReplaceAll(k.name, " ", "-")
			outage(t, name, func(t *testing.T, cli *redis.Client) (closer, acquire) {
				c, acq, err := k.open(cli, name, redisio.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				return c, acq
			})
		})
	}
}

// TestCloseOfLostSessionWithinTTL: Close of a session lost in an outage,
// as its helper still tries to delete what the session held, returns
// within the TTL too (allowing it twice over again), and leaves no
// goroutine behind. The helper repeated its deletes until its own
// timeout (5 s) whatever Close's deadline, and Close waited for it.
func TestCloseOfLostSessionWithinTTL(t *testing.T) {
	const ttl = time.Second
	const bound = 3 * ttl
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	px, cli := proxied(t, r, redis.Options{})
	s, _ := heldOnSession(t, cli, ttl, "close-bound/lost")
	px.BlackholeTx()
	px.BlackholeRx()
	defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
	select {
	case <-s.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the session was not lost within 30s of the outage")
	}
	if err := closeWithin(t, "Close of the lost session", s, ttl, bound); err != nil {
		t.Errorf("Close of a lost session: %v, want nil", err)
	}
}

// TestCloseLeavesNoReleaseOfUnlockInOutage: an Unlock that returned early,
// its context ended while Redis did not answer, leaves its release script
// running on the session; the session's Close, which returns within the
// TTL, leaves no goroutine of that release behind (go-redis's ReadTimeout
// at its default, 5 s, longer than the TTL). The release ran on a
// goroutine of its own that Close did not wait for, on the client's
// timeouts: it outlived Close until the client's read timed out.
func TestCloseLeavesNoReleaseOfUnlockInOutage(t *testing.T) {
	const ttl = 2 * time.Second
	const bound = 3 * ttl
	const name = "close-bound/unlock"
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	px, cli := proxied(t, r, redis.Options{})
	// Every goroutine started from here on but the proxy's must be gone
	// once Close returns.
	before := goleak.IgnoreCurrent()
	s, l := heldOnSession(t, cli, ttl, name)
	px.BlackholeTx()
	px.BlackholeRx()
	defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	// Unlock returns as its context ends, its release under way.
	if err := l.Unlock(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock while Redis does not answer: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	closeWithin(t, "Close", s, ttl, bound)
	if err := goleak.Find(before, goleak.IgnoreAnyFunction("github.com/ahrtr/disco/internal/faultproxy.(*Proxy).pump")); err != nil {
		t.Errorf("goroutines left once Close returned: %v", err)
	}
}

// heldOnSession returns a new session of ttl on cli and a lock on name on
// it, held.
func heldOnSession(t *testing.T, cli *redis.Client, ttl time.Duration, name string) (*redisio.Session, lock.Service) {
	t.Helper()
	s, err := redisio.NewSession(cli, redisio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s, l
}

// closeWithin closes c and fails t if that, what, took longer than bound
// (the TTL ttl, allowing more for a loaded machine) while Redis did not
// answer; it returns Close's error.
func closeWithin(t *testing.T, what string, c interface{ Close() error }, ttl, bound time.Duration) error {
	t.Helper()
	start := time.Now()
	err := c.Close()
	took := time.Since(start)
	t.Logf("Close took %v: %v", took, err)
	if took > bound {
		t.Errorf("%s took %v while Redis did not answer, beyond its bound, the TTL %v (allowing %v)", what, took, ttl, bound)
	}
	return err
}

// TestCloseWithinTTLWhilePubSubReconnects: the session's Close returns
// within the TTL while the session's pub/sub connection, broken, is
// being opened again and Redis does not answer the new one (the
// client's ReadTimeout longer than the TTL).
func TestCloseWithinTTLWhilePubSubReconnects(t *testing.T) {
	const ttl = time.Second
	const bound = 3 * ttl
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	s, _ := heldOnSession(t, cli, ttl, "close-bound/pubsub")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Nothing sent reaches Redis, and Redis drops the pub/sub connection:
	// go-redis opens another, and waits for the answer to its handshake.
	px.PauseTx()
	defer px.UnpauseTx()
	if err := admin.Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the pub/sub connection opened again", func() bool {
		return goroutineIn("go-redis/v9.(*PubSub).reconnect(")
	})
	closeWithin(t, "Close", s, ttl, bound)
}

// goroutineIn reports whether a goroutine's stack holds a frame of fn (a
// function's name as runtime.Stack shows it, with its "(").
func goroutineIn(fn string) bool {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Contains(string(buf[:n]), fn)
		}
		buf = make([]byte, 2*len(buf))
	}
}
