package redisio_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

// TestCallBoundedByContextInOutage: a call whose context ends while Redis
// does not answer (the client's ReadTimeout at go-redis's default, 5 s;
// the call's context 300 ms, past its deadline or canceled), an
// acquisition, a double barrier's Enter or Leave, a barrier's Hold,
// Release or Wait, or Proclaim, returns soon after its context ends, well
// before the client's read times out, with an error wrapping the
// context's error; and once Redis answers again, nothing the call wrote
// is left: what its request wrote when it landed after the caller gave up
// is undone, and the name's keys are as they were before the call, or
// gone.
func TestCallBoundedByContextInOutage(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		// bound is how long after its start the call must have returned:
		// short of the client's ReadTimeout, generous for a loaded machine.
		bound = 3 * time.Second
	)
	lockOf := func(cli *redis.Client, name string) (lock.Service, error) { return redisio.NewLock(cli, name) }
	rwOf := func(cli *redis.Client, name string) (rwlock.Service, error) { return redisio.NewRWLock(cli, name) }
	semOf := func(cli *redis.Client, name string) (semaphore.Service, error) {
		return redisio.NewSemaphore(cli, name, 2)
	}
	locks := opens(lockOf, func(ctx context.Context, l lock.Service) error { _, err := l.Lock(ctx); return err })
	parties := func(count int, before func(context.Context, barrier.DoubleBarrier) error, call func(context.Context, barrier.DoubleBarrier) error) func(cli, admin *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
		return func(cli, _ *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
			d, err := redisio.NewDoubleBarrier(cli, name, count)
			if err != nil {
				return nil, nil, err
			}
			if before != nil {
				if err := before(context.Background(), d); err != nil {
					d.Close()
					return nil, nil, err
				}
			}
			return d, func(ctx context.Context) error { return call(ctx, d) }, nil
		}
	}
	enter := func(ctx context.Context, d barrier.DoubleBarrier) error { return d.Enter(ctx) }
	leave := func(ctx context.Context, d barrier.DoubleBarrier) error { return d.Leave(ctx) }
	// barriers makes the barrier on cli, held (on admin) if held, and
	// returns its call.
	barriers := func(held bool, call func(context.Context, barrier.Barrier) error) func(cli, admin *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
		return func(cli, admin *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
			b, err := redisio.NewBarrier(cli, name)
			if err != nil {
				return nil, nil, err
			}
			if held {
				h, err := redisio.NewBarrier(admin, name)
				if err != nil {
					return nil, nil, err
				}
				if err := h.Hold(context.Background()); err != nil {
					return nil, nil, err
				}
			}
			return io.NopCloser(nil), func(ctx context.Context) error { return call(ctx, b) }, nil
		}
	}
	proclaim := func(cli, _ *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
		e, err := redisio.NewElection(cli, name)
		if err != nil {
			return nil, nil, err
		}
		if err := e.Campaign(context.Background(), "old"); err != nil {
			e.Close()
			return nil, nil, err
		}
		return e, func(ctx context.Context) error { return e.Proclaim(ctx, "new") }, nil
	}
	cases := []struct {
		name     string
		canceled bool // the context is canceled rather than past its deadline
		// open makes the primitive on cli (admin: a client Redis answers)
		// and returns its call.
		open func(cli, admin *redis.Client, name string) (io.Closer, func(context.Context) error, error)
		// waiting, if set, says when the call waits with its requests
		// answered: Redis falls silent then, not before the call.
		waiting func(state map[string]string) bool
		// silentAt, if set, says which chunk sent makes Redis fall
		// silent, that chunk held, rather than before the call.
		silentAt func(sent []byte) bool
	}{
		{name: "lock", open: locks},
		{name: "lock canceled", canceled: true, open: locks},
		{name: "lock try", open: opens(lockOf, func(ctx context.Context, l lock.Service) error { _, err := l.TryLock(ctx); return err })},
		{name: "rwlock read", open: opens(rwOf, func(ctx context.Context, l rwlock.Service) error { _, err := l.RLock(ctx); return err })},
		{name: "rwlock write", open: opens(rwOf, func(ctx context.Context, l rwlock.Service) error { _, err := l.Lock(ctx); return err })},
		{name: "election", open: opens(func(cli *redis.Client, name string) (election.Service, error) { return redisio.NewElection(cli, name) },
			func(ctx context.Context, e election.Service) error { return e.Campaign(ctx, "v") })},
		{name: "semaphore", open: opens(semOf, func(ctx context.Context, m semaphore.Service) error { _, err := m.Acquire(ctx); return err })},
		{name: "semaphore try", open: opens(semOf, func(ctx context.Context, m semaphore.Service) error { _, err := m.TryAcquire(ctx); return err })},
		{name: "double barrier enter", open: parties(2, nil, enter)},
		{name: "double barrier enter canceled", canceled: true, open: parties(2, nil, enter)},
		{name: "double barrier enter waiting", open: parties(2, nil, enter), waiting: func(s map[string]string) bool { return len(s) > 0 }},
		{name: "double barrier leave", open: parties(1, enter, leave)},
		{name: "double barrier leave canceled", canceled: true, open: parties(1, enter, leave)},
		{name: "barrier hold", open: barriers(false, func(ctx context.Context, b barrier.Barrier) error { return b.Hold(ctx) })},
		{name: "barrier release", open: barriers(true, func(ctx context.Context, b barrier.Barrier) error { return b.Release(ctx) })},
		{name: "barrier wait", open: barriers(true, func(ctx context.Context, b barrier.Barrier) error { return b.Wait(ctx) })},
		{name: "barrier wait canceled", canceled: true, open: barriers(true, func(ctx context.Context, b barrier.Barrier) error { return b.Wait(ctx) })},
		// The second connection's handshake is its subscription's: the
		// first one's asked whether the barrier is held.
		{name: "barrier wait subscribing", open: barriers(true, func(ctx context.Context, b barrier.Barrier) error { return b.Wait(ctx) }),
			silentAt: nth(2, []byte("hello"))},
		{name: "election proclaim", open: proclaim},
	}
	r := testserver.StartRedis(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testkit.NoLeaks(t)
			name := "call-outage/" + c.name
			admin := newClient(t, r)
			px, cli := proxied(t, r, redis.Options{})
			p, call, err := c.open(cli, admin, name)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
			defer lcancel()
			before := stateOf(lctx, admin, name)
			// The link holds what is sent until it is unpaused: the
			// call's request lands after its caller gave up.
			pause := func() { px.PauseTx(); px.PauseRx() }
			unpause := func() { px.UnpauseTx(); px.UnpauseRx() }
			defer unpause()
			switch {
			case c.silentAt != nil:
				px.WatchTx(func(b []byte) {
					if c.silentAt(b) {
						pause()
					}
				})
			case c.waiting == nil:
				pause()
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			want := context.DeadlineExceeded
			if c.canceled {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(timeout, cancel)
				want = context.Canceled
			}
			defer cancel()
			// The call's helpers are what begins from now on.
			others := goleak.IgnoreCurrent()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- call(ctx) }()
			if c.waiting != nil {
				testkit.Eventually(t, 10*time.Second, "the call waiting", func() bool { return c.waiting(stateOf(lctx, admin, name)) })
				pause()
				before = map[string]string{} // it wrote what is there now
			}
			cerr := returnedWithin(t, done, start, bound, timeout, unpause)
			if !errors.Is(cerr, want) {
				t.Errorf("call in an outage: %v, want an error wrapping %v", cerr, want)
			}
			unpause()
			// Its left request is answered and undone once its helper
			// has ended.
			// (The link's own goroutines, for a connection it made, stay.)
			link := goleak.IgnoreAnyFunction("github.com/ahrtr/disco/internal/faultproxy.(*Proxy).pump")
			if err := goleak.Find(others, link); err != nil {
				t.Errorf("the call's helpers once Redis answers: %v", err)
			}
			for k, v := range stateOf(lctx, admin, name) {
				if was, ok := before[k]; !ok || was != v {
					t.Errorf("once Redis answered, %s is %s, was %q", k, v, was)
				}
			}
		})
	}
}

// TestWaiterGivesUpInOutage: a waiter whose context ends while Redis does
// not answer returns soon after, with its context's error, not once its
// withdrawal's requests give up (5 s); and once Redis answers again, its
// queued hold is gone.
func TestWaiterGivesUpInOutage(t *testing.T) {
	const (
		timeout = 1500 * time.Millisecond
		bound   = 4 * time.Second // short of the withdrawal's 5 s, generous for a loaded machine
		name    = "acquire-outage/waiter"
	)
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{})
	holder, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	waiter, err := redisio.NewLock(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := waiter.Lock(ctx); done <- err }()
	lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
	defer lcancel()
	testkit.Eventually(t, 10*time.Second, "the waiter's hold queued", func() bool {
		return len(leftBehindOf(lctx, admin, name)) >= 2
	})
	px.PauseTx()
	px.PauseRx()
	unpause := func() { px.UnpauseTx(); px.UnpauseRx() }
	defer unpause()
	werr := returnedWithin(t, done, start, bound, timeout, unpause)
	if !errors.Is(werr, context.DeadlineExceeded) {
		t.Errorf("waiter in an outage: %v, want an error wrapping context.DeadlineExceeded", werr)
	}
	unpause()
	if err := holder.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "nothing left behind once Redis answers", func() bool {
		return len(leftBehindOf(lctx, admin, name)) == 0
	})
}

// TestCloseWaitsForEnqueueUnderWay: Close of a lock on a shared session,
// while its acquisition's enqueue is unanswered (the link holds it),
// returns only once that enqueue is answered and what it queued is
// withdrawn: the next owner's TryLock right after finds the lock free.
// Close returned as the acquisition left its request under way (half a
// second), and the hold it queued stood after Close had returned.
func TestCloseWaitsForEnqueueUnderWay(t *testing.T) {
	const name = "acquire-outage/close-enqueue"
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Bool
	px.WatchTx(func(b []byte) {
		if bytes.Contains(b, []byte(name+"/")) {
			sent.Store(true)
		}
	})
	px.PauseTx()
	unpause := sync.OnceFunc(px.UnpauseTx)
	defer unpause()
	locked := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); locked <- err }()
	testkit.Eventually(t, 10*time.Second, "the enqueue sent", sent.Load)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	var cerr error
	select {
	case cerr = <-closed:
		t.Errorf("Close returned while its acquisition's enqueue was unanswered: %v", cerr)
		unpause()
	case <-time.After(2 * time.Second): // a negative check: longer than a caller's wait to leave a request
		unpause()
		cerr = <-closed
	}
	if cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	if err := <-locked; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("Lock: %v, want ErrClosed", err)
	}
	next, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := next.TryLock(ctx); err != nil {
		t.Errorf("TryLock right after Close returned: %v", err)
	}
}

// TestCloseOfWaiterOnSlowRedisLeavesNothing: Close of a waiter, while
// Redis answers slowly (each request sent 800 ms late, longer than a
// caller waits for its withdrawal before it leaves it under way), returns
// only once the waiter's key is gone: the next owner's TryLock, after the
// holder's release, finds the lock free.
func TestCloseOfWaiterOnSlowRedisLeavesNothing(t *testing.T) {
	const name = "acquire-outage/slow-close"
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{})
	holder, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held := leftBehindOf(ctx, admin, name) // the holder's keys
	slices.Sort(held)
	// On a session of its own Close waits for the session's helpers: the
	// waiter shares one.
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waiter, err := redisio.NewLock(cli, name, redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := waiter.Lock(ctx); done <- err }()
	testkit.Eventually(t, 10*time.Second, "the waiter's hold queued", func() bool {
		return len(leftBehindOf(ctx, admin, name)) > len(held)
	})
	px.DelayTx(800 * time.Millisecond)
	defer px.UndelayTx()
	if err := waiter.Close(); err != nil {
		t.Fatalf("Close of the waiter: %v", err)
	}
	left := leftBehindOf(ctx, admin, name)
	slices.Sort(left)
	if !slices.Equal(left, held) {
		t.Errorf("keys after the waiter's Close returned: %v, want the holder's alone: %v", left, held)
	}
	if err := <-done; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("the waiter's Lock: %v, want ErrClosed", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := next.TryLock(ctx); err != nil {
		t.Errorf("TryLock after the waiter's Close and the holder's release: %v", err)
	}
}

// opens returns what makes a primitive on cli with made and returns it
// with its acquisition, acq.
func opens[P io.Closer](made func(cli *redis.Client, name string) (P, error), acq func(context.Context, P) error) func(cli, admin *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
	return func(cli, _ *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
		p, err := made(cli, name)
		if err != nil {
			return nil, nil, err
		}
		return p, func(ctx context.Context) error { return acq(ctx, p) }, nil
	}
}

// returnedWithin returns what the call begun at start, whose context
// ended after timeout, sent on done, failing t unless it came within
// bound; if not, it unpauses the link (unpause) and waits for it.
func returnedWithin(t *testing.T, done <-chan error, start time.Time, bound, timeout time.Duration, unpause func()) error {
	t.Helper()
	select {
	case err := <-done:
		t.Logf("returned after %v: %v", time.Since(start), err)
		return err
	case <-time.After(bound):
		t.Errorf("not returned %v after it began, its context ended after %v", bound, timeout)
		unpause()
		err := <-done
		t.Logf("returned after %v once Redis answered: %v", time.Since(start), err)
		return err
	}
}

// stateOf returns the keys of name that hold, queue or mark something
// (as leftBehindOf, not its counters) with their contents, but not their
// expiries.
func stateOf(ctx context.Context, admin *redis.Client, name string) map[string]string {
	state := map[string]string{}
	for _, k := range admin.Keys(ctx, globEscape(name)+"/*").Val() {
		switch k {
		case name + "/seq", name + "/permits", name + "/rtok":
			continue
		}
		switch admin.Type(ctx, k).Val() {
		case "string":
			state[k] = admin.Get(ctx, k).Val()
		case "hash":
			h := admin.HGetAll(ctx, k).Val()
			if k == name+"/held" {
				delete(h, "n")
				if len(h) == 0 {
					continue
				}
			}
			state[k] = fmt.Sprint(h) // fmt sorts a map's keys
		case "zset":
			state[k] = fmt.Sprint(admin.ZRange(ctx, k, 0, -1).Val())
		default:
			state[k] = "?"
		}
	}
	return state
}

// nth returns what reports whether a chunk is the n-th to contain word.
func nth(n int, word []byte) func([]byte) bool {
	var seen atomic.Int32
	return func(b []byte) bool {
		return bytes.Contains(b, word) && seen.Add(1) == int32(n)
	}
}
