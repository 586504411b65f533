package memio_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
)

// The name "/" is refused with ErrInvalidArgument by every constructor, as
// etcdio, zkio and redisio refuse it (memio took it).
func TestSlashNameRefused(t *testing.T) {
	st := memio.NewStore()
	type ctor struct {
		what string
		f    func() (interface{ Close() error }, error)
	}
	for _, c := range []ctor{
		{"NewLock", func() (interface{ Close() error }, error) { return memio.NewLock(st, "/") }},
		{"NewRWLock", func() (interface{ Close() error }, error) { return memio.NewRWLock(st, "/") }},
		{"NewElection", func() (interface{ Close() error }, error) { return memio.NewElection(st, "/") }},
		{"NewSemaphore", func() (interface{ Close() error }, error) { return memio.NewSemaphore(st, "/", 2) }},
		{"NewDoubleBarrier", func() (interface{ Close() error }, error) { return memio.NewDoubleBarrier(st, "/", 2) }},
	} {
		svc, err := c.f()
		if err == nil {
			svc.Close()
		}
		if !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf(`%s(st, "/") = %v, want an error wrapping primitives.ErrInvalidArgument, as on etcd, ZooKeeper and Redis`, c.what, err)
		}
	}
	if _, err := memio.NewBarrier(st, "/"); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf(`NewBarrier(st, "/") = %v, want an error wrapping primitives.ErrInvalidArgument`, err)
	}
}

// NewDoubleBarrier refuses WithValue, which only NewLock takes (it was
// accepted).
func TestDoubleBarrierRefusesWithValue(t *testing.T) {
	st := memio.NewStore()
	d, err := memio.NewDoubleBarrier(st, "/b", 2, memio.WithValue("host:1"))
	if err == nil {
		d.Close()
	}
	if !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("NewDoubleBarrier with WithValue = %v, want an error wrapping primitives.ErrInvalidArgument", err)
	}
}

// A second Close returns an error wrapping primitives.ErrClosed, also
// after the session expired (it returned nil).
func TestSecondCloseAfterExpire(t *testing.T) {
	st := memio.NewStore()
	s, err := memio.NewSession(st)
	if err != nil {
		t.Fatal(err)
	}
	s.Expire()
	if err := s.Close(); err != nil {
		t.Fatalf("first Close of an expired session: %v", err)
	}
	if err := s.Close(); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("second Close = %v, want an error wrapping primitives.ErrClosed", err)
	}
}

// lateClock is a user's Clock whose timers run only when the test says
// (as a real timer's goroutine may run late); Now is set by the test.
type lateClock struct {
	mu  sync.Mutex
	now time.Time
	fs  []func()
}

func (c *lateClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *lateClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *lateClock) AfterFunc(d time.Duration, f func()) memio.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fs = append(c.fs, f)
	return lateTimer{}
}
func (c *lateClock) fire() {
	c.mu.Lock()
	fs := c.fs
	c.fs = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

type lateTimer struct{}

func (lateTimer) Stop() bool { return false }

// A Resume that comes after the deadline, before the session's timer ran,
// revives nothing: the session expires (it resumed, and its holder kept
// its grant although its lease had run out).
func TestResumeAfterDeadlineExpires(t *testing.T) {
	testkit.NoLeaks(t)
	t0 := time.Unix(1e9, 0)
	c := &lateClock{now: t0}
	st := memio.NewStore(memio.WithClock(c))
	s, err := memio.NewSession(st, memio.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := memio.NewLock(st, "/jobs", memio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s.StopRenewals()
	c.set(t0.Add(11 * time.Second)) // past the deadline, t0+10s; the timer has not run yet
	s.Resume()
	c.fire() // the late timer runs now
	if err := s.Err(); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("session resumed 1 s after its deadline: Err() = %v, want ErrLost; lock still held: %v", err, l.Err() == nil)
	}
}

// A double barrier party whose key is deleted while its Enter waits fails
// with ErrLost, as on etcd and Redis (the Enter waited on, and was let in
// when count other parties entered: count+1 passed a barrier for count).
func TestDoubleBarrierWaiterKeyDeleted(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	party := func() interface {
		Enter(context.Context) error
		Close() error
	} {
		p, err := memio.NewDoubleBarrier(st, "/db", 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	p1, p2, p3 := party(), party(), party()
	entered := make(chan error, 1)
	go func() { entered <- p1.Enter(ctx) }()
	var key string
	testkit.Eventually(t, 5*time.Second, "p1's key", func() bool {
		ks := st.Keys("/db/waiters/")
		if len(ks) == 1 {
			key = ks[0]
		}
		return key != ""
	})
	if !st.DeleteKey(key) {
		t.Fatalf("DeleteKey %s: false", key)
	}
	// p2 and p3 make a full round of 2 without p1.
	var wg sync.WaitGroup
	for _, p := range []interface{ Enter(context.Context) error }{p2, p3} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Enter(ctx) }()
	}
	wg.Wait()
	select {
	case err := <-entered:
		if !errors.Is(err, primitives.ErrLost) {
			t.Fatalf("p1.Enter after its key was deleted = %v, want an error wrapping ErrLost (keys now %v)", err, st.Keys("/db"))
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("p1.Enter still waiting 5 s after its key was deleted, want an error wrapping ErrLost")
	}
}

// The same with another party in the round when p1's key goes: the round
// fills without p1, and p1's Enter fails; at most count parties pass.
func TestDoubleBarrierWaiterKeyDeletedNotLetIn(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ps []interface {
		Enter(context.Context) error
		Close() error
	}
	for range 4 {
		p, err := memio.NewDoubleBarrier(st, "/db", 3)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		ps = append(ps, p)
	}
	results := make([]chan error, 4)
	enter := func(i int) {
		results[i] = make(chan error, 1)
		go func() { results[i] <- ps[i].Enter(ctx) }()
	}
	enter(0)
	testkit.Eventually(t, 5*time.Second, "p0's key", func() bool { return len(st.Keys("/db/waiters/")) == 1 })
	enter(1)
	testkit.Eventually(t, 5*time.Second, "p1's key", func() bool { return len(st.Keys("/db/waiters/")) == 2 })
	p1key := st.Keys("/db/waiters/")[1] // the later revision
	if !st.DeleteKey(p1key) {
		t.Fatalf("DeleteKey %s: false", p1key)
	}
	enter(2)
	enter(3)
	var passed int
	for i := range 4 {
		select {
		case err := <-results[i]:
			if err == nil {
				passed++
			}
			if i == 1 {
				t.Logf("p1 (key %s deleted while it waited): Enter = %v", p1key, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("party %d still waiting 5 s after the round could complete", i)
		}
	}
	if passed > 3 {
		t.Fatalf("%d parties passed Enter of a double barrier for 3 (p1's key was deleted while it waited: want ErrLost for it)", passed)
	}
}

// A waiter granted while its session is paused, whose pause outlasts the
// TTL, loses the grant before Lock returns: Lock fails with the service's
// error (it returned the lost grant with a nil error).
func TestPausedWaiterWhoseGrantWasLostFails(t *testing.T) {
	testkit.NoLeaks(t)
	clock := memio.NewFakeClock(time.Unix(1e9, 0))
	st := memio.NewStore(memio.WithClock(clock))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder, err := memio.NewLock(st, "/jobs", memio.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := memio.NewLock(st, "/jobs", memio.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	events := waiter.Subscribe(ctx)
	type res struct {
		err error
	}
	done := make(chan res, 1)
	go func() { _, err := waiter.Lock(ctx); done <- res{err} }()
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool { return len(st.Keys("/jobs/")) == 2 })
	resume := memio.SessionOf(waiter).Pause()
	if err := holder.Unlock(ctx); err != nil { // the waiter is granted, paused
		t.Fatal(err)
	}
	clock.Advance(11 * time.Second) // the pause outlasts the TTL
	var seen []string
	for ev := range events {
		seen = append(seen, kindOf(ev))
	}
	resume()
	r := <-done
	if r.err == nil {
		t.Fatalf("waiter.Lock returned a grant, nil error, after its grant was lost during the pause (events %v, waiter.Err() = %v)", seen, waiter.Err())
	}
}

// An election's Leader waits while its session is paused, as every request
// does (it answered at once).
func TestPausedLeaderWaits(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	e, err := memio.NewElection(st, "/e")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	if err := e.Campaign(ctx, "me"); err != nil {
		t.Fatal(err)
	}
	resume := memio.SessionOf(e).Pause()
	defer resume()
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	l, err := e.Leader(lctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Leader on a paused session = %+v, %v; want it to wait until the pause ends (here: ctx's DeadlineExceeded)", l, err)
	}
}

// Pauses nest: the first's resume leaves the session frozen while the
// second holds, and a pause that outlasts the TTL expires it (the first
// resume restored renewals).
func TestNestedPausesHoldTheSession(t *testing.T) {
	testkit.NoLeaks(t)
	clock := memio.NewFakeClock(time.Unix(1e9, 0))
	st := memio.NewStore(memio.WithClock(clock))
	s, err := memio.NewSession(st, memio.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r1 := s.Pause()
	r2 := s.Pause()
	defer r2()
	r1()                            // the second pause still holds
	clock.Advance(11 * time.Second) // and outlasts the TTL
	if err := s.Err(); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("session paused 11 s (TTL 10 s) by a pause not yet ended: Err() = %v, want ErrLost", err)
	}
}

// The parties of one double barrier must be given one count: an Enter
// whose count is not that of the parties in the round fails with an error
// wrapping primitives.ErrInvalidArgument and is not counted, as on Redis;
// the round goes on with its count. (memio took the count from the
// round's first party: a party for 2 behind one for 3 waited for a third,
// and a party for 3 behind one for 2 passed with two, contrary to each
// one's Count.)
func TestDoubleBarrierCountMismatchRefused(t *testing.T) {
	testkit.NoLeaks(t)
	for _, c := range []struct{ first, other int }{{3, 2}, {2, 3}} {
		t.Run(fmt.Sprintf("%d then %d", c.first, c.other), func(t *testing.T) {
			st := memio.NewStore()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			party := func(count int) barrier.DoubleBarrier {
				return testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(memio.NewDoubleBarrier(st, "/db", count))
			}
			first := party(c.first)
			results := make(chan error, c.first)
			go func() { results <- first.Enter(ctx) }()
			testkit.Eventually(t, 5*time.Second, "the first party's key", func() bool { return len(st.Keys("/db/waiters/")) == 1 })
			other := party(c.other)
			octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
			defer ocancel()
			if err := other.Enter(octx); !errors.Is(err, primitives.ErrInvalidArgument) {
				t.Fatalf("Enter of a party for %d beside one for %d = %v, want an error wrapping primitives.ErrInvalidArgument, as on Redis", c.other, c.first, err)
			}
			if ks := st.Keys("/db/waiters/"); len(ks) != 1 || other.Err() != nil {
				t.Fatalf("after the refused Enter: keys %v, its party's Err() = %v; want the first party's key alone, a usable party", ks, other.Err())
			}
			for range c.first - 1 {
				p := party(c.first)
				go func() { results <- p.Enter(ctx) }()
			}
			for range c.first {
				if err := <-results; err != nil {
					t.Fatalf("Enter of a party for %d: %v", c.first, err)
				}
			}
		})
	}
}
