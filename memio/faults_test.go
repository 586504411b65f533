package memio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// fixture is a store on a fake clock with a holder and a waiter of one
// lock, each on its own session with a 10 s TTL.
type fixture struct {
	clock          *memio.FakeClock
	st             *memio.Store
	hs, ws         *memio.Session
	holder, waiter lock.Service
	events         <-chan primitives.Event
	grant          lock.Grant
	waiting        chan lockResult
}

type lockResult struct {
	g   lock.Grant
	err error
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	testkit.NoLeaks(t)
	f := &fixture{clock: memio.NewFakeClock(time.Unix(1e9, 0))}
	f.st = memio.NewStore(memio.WithClock(f.clock))
	var err error
	session := func() *memio.Session {
		s, err := memio.NewSession(f.st, memio.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	f.hs, f.ws = session(), session()
	f.holder = testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(f.st, "/jobs", memio.WithSession(f.hs)))
	f.waiter = testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(f.st, "/jobs", memio.WithSession(f.ws)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.events = f.holder.Subscribe(ctx)
	if f.grant, err = f.holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	f.want(t, "Acquired")
	f.waiting = make(chan lockResult, 1)
	go func() {
		g, err := f.waiter.Lock(ctx)
		f.waiting <- lockResult{g, err}
	}()
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool { return len(f.st.Keys("/jobs/")) == 2 })
	return f
}

// want returns the holder's next event, failing t unless it is of kind.
func (f *fixture) want(t *testing.T, kind string) primitives.Event {
	t.Helper()
	select {
	case e := <-f.events:
		var got string
		switch e.(type) {
		case primitives.Acquired:
			got = "Acquired"
		case primitives.Released:
			got = "Released"
		case primitives.Lost:
			got = "Lost"
		case primitives.Suspended:
			got = "Suspended"
		case primitives.Resumed:
			got = "Resumed"
		}
		if got != kind {
			t.Fatalf("event %#v, want %s", e, kind)
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s event", kind)
		return nil
	}
}

// succeeded waits for the waiter's grant and checks it fences the holder.
func (f *fixture) succeeded(t *testing.T) {
	t.Helper()
	select {
	case r := <-f.waiting:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		g := guard.New()
		if err := g.Check(r.g.Token()); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(f.grant.Token()); !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("guard admitted the old holder's token after the new one's: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not acquire")
	}
}

// still fails t if the waiter acquired.
func (f *fixture) still(t *testing.T) {
	t.Helper()
	select {
	case r := <-f.waiting:
		t.Fatalf("the waiter acquired while the holder's session lives: %+v, %v", r.g, r.err)
	default:
	}
}

// Suspend tells the holder at once, with the deadline one TTL away; the
// fake clock's passing of the TTL then expires the session.
func TestSuspendThenExpire(t *testing.T) {
	f := newFixture(t)
	start := f.clock.Now()
	f.hs.Suspend()
	e := f.want(t, "Suspended").(primitives.Suspended)
	if want := start.Add(10 * time.Second); !e.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v", e.Deadline, want)
	}
	f.clock.Advance(9 * time.Second)
	f.still(t)
	f.clock.Advance(time.Second)
	if l := f.want(t, "Lost").(primitives.Lost); !errors.Is(l.Err, primitives.ErrLost) {
		t.Fatalf("Lost.Err = %v", l.Err)
	}
	f.succeeded(t)
	if !errors.Is(f.holder.Err(), primitives.ErrLost) {
		t.Fatalf("holder's Err = %v, want ErrLost", f.holder.Err())
	}
}

// Resume before the deadline keeps the hold and says so.
func TestSuspendThenResume(t *testing.T) {
	f := newFixture(t)
	f.hs.Suspend()
	f.want(t, "Suspended")
	f.clock.Advance(9 * time.Second)
	f.hs.Resume()
	f.want(t, "Resumed")
	f.clock.Advance(time.Hour)
	f.still(t)
	if err := f.holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.want(t, "Released")
	f.succeeded(t)
}

// Resume with the fake clock not moved since Suspend resumes too: a test
// that suspends and resumes at one instant must not wait for a Resumed
// that never comes.
func TestSuspendThenResumeAtOnce(t *testing.T) {
	f := newFixture(t)
	f.hs.Suspend()
	f.want(t, "Suspended")
	f.hs.Resume()
	f.want(t, "Resumed")
	f.clock.Advance(time.Hour)
	f.still(t)
}

// StopRenewals is a partition: Suspended after half the TTL, Lost at it.
func TestStopRenewals(t *testing.T) {
	f := newFixture(t)
	f.hs.StopRenewals()
	f.clock.Advance(4 * time.Second)
	f.still(t)
	f.clock.Advance(time.Second)
	f.want(t, "Suspended")
	f.clock.Advance(5 * time.Second)
	f.want(t, "Lost")
	f.succeeded(t)
}

// Expire loses the session at once.
func TestExpire(t *testing.T) {
	f := newFixture(t)
	f.hs.Expire()
	f.want(t, "Lost")
	f.succeeded(t)
	select {
	case <-f.hs.Done():
	default:
		t.Fatal("the expired session is not done")
	}
}

// DeleteKey loses only that hold; the holder stays usable.
func TestDeleteKey(t *testing.T) {
	f := newFixture(t)
	if !f.st.DeleteKey(f.grant.Key) {
		t.Fatal("the holder's key is not in the store")
	}
	f.want(t, "Lost")
	f.succeeded(t)
	if err := f.holder.Err(); err != nil {
		t.Fatalf("holder's Err after its key was deleted: %v", err)
	}
	if f.st.DeleteKey(f.grant.Key) {
		t.Fatal("a deleted key deleted again")
	}
}

// FailNext fails exactly the next request and changes nothing.
func TestFailNext(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("boom")
	f.hs.FailNext(boom)
	if err := f.holder.Unlock(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Unlock after FailNext: %v, want boom", err)
	}
	f.still(t)
	if err := f.holder.Unlock(context.Background()); err != nil {
		t.Fatalf("the retried Unlock: %v", err)
	}
	f.want(t, "Released")
	f.succeeded(t)
}

// Pause freezes the session's requests and lets it expire; after the
// resume the holder learns it lost.
func TestPause(t *testing.T) {
	f := newFixture(t)
	resume := f.hs.Pause()
	unlocked := make(chan error, 1)
	go func() { unlocked <- f.holder.Unlock(context.Background()) }()
	f.clock.Advance(10 * time.Second)
	f.succeeded(t)
	resume()
	if err := <-unlocked; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Unlock made during the pause: %v, want ErrLost", err)
	}
}

// Tokens are strictly increasing across every name and session of a store.
func TestTokensIncreaseAcrossTheStore(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	ctx := context.Background()
	var last int64
	for _, name := range []string{"/a", "/b", "/a", "/c"} {
		l, err := memio.NewLock(st, name)
		if err != nil {
			t.Fatal(err)
		}
		g, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(g.Token()) <= last {
			t.Fatalf("token %d on %s after %d", g.Token(), name, last)
		}
		last = int64(g.Token())
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if keys := st.Keys(""); len(keys) != 0 {
		t.Fatalf("keys left after every Close: %v", keys)
	}
}

// A waiter whose session is paused is not handed its grant during the
// pause: as a frozen process, it learns of it once the pause ends.
func TestPausedWaiterLearnsOfGrantAfterPause(t *testing.T) {
	f := newFixture(t)
	resume := f.ws.Pause()
	if err := f.holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-f.waiting:
		t.Fatalf("the paused waiter's Lock returned during the pause: %+v, %v", r.g, r.err)
	case <-time.After(100 * time.Millisecond): // a negative check, not synchronisation
	}
	resume()
	f.succeeded(t)
}

// A paused waiter whose context ends during the pause, after its grant
// came, gets its context's error and holds nothing: the next owner takes
// the lock.
func TestPausedWaiterGivesUpDuringPause(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	h := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/jobs"))
	w := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/jobs"))
	next := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/jobs"))
	if _, err := h.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan error, 1)
	go func() { _, err := w.Lock(ctx); waiting <- err }()
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool { return len(st.Keys("/jobs/")) == 2 })
	resume := memio.SessionOf(w).Pause()
	defer resume()
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-waiting:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter's Lock: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter's Lock did not return when its context ended")
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer tcancel()
	if _, err := next.Lock(tctx); err != nil {
		t.Fatalf("the next owner: %v", err)
	}
	resume()
	if _, err := w.TryLock(context.Background()); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("the waiter's TryLock after the pause: %v, want ErrLockTaken", err)
	}
}

// A pause's end keeps the renewals an earlier StopRenewals stopped
// stopped: the session expires at its deadline unless Resume comes.
func TestPauseEndKeepsRenewalsStopped(t *testing.T) {
	f := newFixture(t)
	f.hs.StopRenewals()
	resume := f.hs.Pause()
	resume()
	f.clock.Advance(10 * time.Second)
	f.succeeded(t)
}

// Resume during a pause lets renewals through only once the pause ends: a
// paused process renews nothing. The session whose pause outlasts its TTL
// expires even though Resume came during the pause.
func TestResumeDuringPauseWaitsForItsEnd(t *testing.T) {
	f := newFixture(t)
	f.hs.StopRenewals()
	resume := f.hs.Pause()
	f.hs.Resume()
	f.clock.Advance(10 * time.Second)
	resume()
	f.succeeded(t)
}

// Resume after a pause that followed StopRenewals lets renewals through
// again: the session outlives its TTL.
func TestResumeAfterPause(t *testing.T) {
	f := newFixture(t)
	f.hs.StopRenewals()
	resume := f.hs.Pause()
	resume()
	f.hs.Resume()
	f.clock.Advance(20 * time.Second)
	if err := f.hs.Err(); err != nil {
		t.Fatalf("the session renewed after Resume: %v, want it alive", err)
	}
	f.still(t)
}
