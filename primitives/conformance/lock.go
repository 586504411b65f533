package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestLock checks every promise of lock.Service and lock.Do against b, one
// parallel subtest per law:
//
//   - ExclusionOrderAndTokens: one holder at a time; holds in Created order;
//     tokens strictly increase.
//   - SameOwnerWaits: a second Lock of the holding Service waits for Unlock.
//   - TryLock: ErrLockTaken at once while anyone holds, the holder included.
//   - UnlockAndReleaseNotHeld: ErrNotHeld for holds that are not this
//     Service's; a retried Release never frees a later hold.
//   - ReleaseMatchesCreated: Release names a grant by Created; zero never
//     matches.
//   - CancelledLockLeavesNothing: a Lock past its deadline returns ctx.Err()
//     and blocks nobody.
//   - Events: Acquired and Released in order, only after Subscribe; the
//     channel closes with its context.
//   - SlowSubscriberMissesNothing: a subscriber that does not read stalls
//     nothing and loses nothing.
//   - CloseReleasesPromptly: the next owner does not wait for a TTL; then
//     ErrClosed everywhere.
//   - ConcurrentCloses: of two Closes of a holder at once, one returns nil
//     and the other ErrClosed, each only once the hold is released.
//   - KillSession: Lost, Do's context cancelled with ErrLost, Done, ErrLost
//     everywhere (Close then returns nil, a second one ErrClosed); the
//     successor's higher token fences the zombie.
//   - UnlockRacingLoss: an Unlock racing the session's loss ends the hold
//     with exactly one of Released (Unlock returns nil) or Lost (Unlock
//     returns an error wrapping ErrLost).
//   - KillSessionOfWaiter: a waiting Lock fails with ErrLost and leaves
//     nothing.
//   - DeleteKey: Lost, Do's context cancelled, the Service stays usable; the
//     next token is higher.
//   - Do: fn's error alone, released after fn; a failed Lock skips fn.
//   - PausedHolderIsFenced: a successor takes over after the TTL with a higher
//     token; the paused holder sees Lost when it resumes.
//   - LostAtDeadline: a holder cut off from its store is told Suspended,
//     then Lost no later than LostLate after Suspended.Deadline; a
//     successor holds only after that deadline.
//   - GrantWhileSuspended: a hold granted on a suspended session is
//     followed by Suspended (or, not granted before the deadline, the Lock
//     fails with ErrLost).
//   - LayoutKeyDeleted: deleting any one key of the layout keeps exclusion,
//     or the holder is told Lost within half a TTL and the successor's
//     token is higher.
//   - WaiterKeyDeleted: a waiter whose key is deleted fails with ErrLost
//     within half a TTL and blocks nobody.
//   - CancelledAtAnyMoment: Locks whose contexts end at any step of their
//     acquisition return ctx.Err() itself, and leave nothing.
//   - GrantTokenNow: a primitives.GrantToken stamps the grant's token as
//     soon as Lock returns and none once Unlock returns or Do's context
//     ends for a loss.
//   - BadNames: every bad name is refused with ErrInvalidArgument.
//   - EndedContextKeepsHold: Unlock and Release given a context that has
//     ended fail with its error and keep the hold.
//   - NilContext: every call, lock.Do included, given a nil context fails with
//     ErrInvalidArgument (Subscribe: a channel closed at once), writes
//     nothing and keeps the hold.
func TestLock(t *testing.T, b Backend) {
	t.Helper()
	b.check(t)
	law(t, "ExclusionOrderAndTokens", func(t *testing.T) { lockExclusion(t, b) })
	law(t, "SameOwnerWaits", func(t *testing.T) { lockSameOwnerWaits(t, b) })
	law(t, "TryLock", func(t *testing.T) { lockTry(t, b) })
	law(t, "UnlockAndReleaseNotHeld", func(t *testing.T) { lockNotHeld(t, b) })
	law(t, "ReleaseMatchesCreated", func(t *testing.T) { lockReleaseCreated(t, b) })
	law(t, "CancelledLockLeavesNothing", func(t *testing.T) { lockCancelled(t, b) })
	law(t, "Events", func(t *testing.T) { lockEvents(t, b) })
	law(t, "SlowSubscriberMissesNothing", func(t *testing.T) { lockSlowSubscriber(t, b) })
	law(t, "CloseReleasesPromptly", func(t *testing.T) { lockClose(t, b) })
	law(t, "ConcurrentCloses", func(t *testing.T) { lockConcurrentCloses(t, b) })
	law(t, "KillSession", func(t *testing.T) { lockKillSession(t, b) })
	law(t, "KillSessionOfWaiter", func(t *testing.T) { lockKillWaiter(t, b) })
	law(t, "UnlockRacingLoss", func(t *testing.T) { lockUnlockRacingLoss(t, b) })
	law(t, "DeleteKey", func(t *testing.T) { lockDeleteKey(t, b) })
	law(t, "Do", func(t *testing.T) { lockDo(t, b) })
	law(t, "PausedHolderIsFenced", func(t *testing.T) { lockPause(t, b) })
	law(t, "LostAtDeadline", func(t *testing.T) { lockLostAtDeadline(t, b) })
	law(t, "GrantWhileSuspended", func(t *testing.T) { lockGrantWhileSuspended(t, b) })
	law(t, "LayoutKeyDeleted", func(t *testing.T) { lockLayoutKeyDeleted(t, b) })
	law(t, "WaiterKeyDeleted", func(t *testing.T) { lockWaiterKeyDeleted(t, b) })
	law(t, "CancelledAtAnyMoment", func(t *testing.T) { lockCancelledAnyMoment(t, b) })
	law(t, "GrantTokenNow", func(t *testing.T) { lockGrantTokenNow(t, b) })
	law(t, "BadNames", func(t *testing.T) { badNames(t, b, "lock") })
	law(t, "EndedContextKeepsHold", func(t *testing.T) { lockEndedContext(t, b) })
	law(t, "NilContext", func(t *testing.T) { lockNilContext(t, b) })
}

func mustLock(t *testing.T, b Backend, l lock.Service) lock.Grant {
	t.Helper()
	g, err := l.Lock(b.ctx(t))
	ok(t, err, "Lock")
	return g
}

// lockExclusion: owners contending in rounds are never inside together; the
// holds come in the order of their Created (first come, first served) and
// their tokens strictly increase; nothing is left behind.
func lockExclusion(t *testing.T, b Backend) {
	const owners, rounds = 5, 4
	var inside atomic.Int32
	var mu sync.Mutex
	var holds []lock.Grant
	var wg sync.WaitGroup
	errs := make(chan error, owners*rounds)
	for range owners {
		l := b.NewLock(t, name(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				g, err := l.Lock(b.ctx(t))
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- errors.New("two holders inside the critical section")
				}
				mu.Lock()
				holds = append(holds, g)
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(holds) != owners*rounds {
		t.Fatalf("%d holds, want %d", len(holds), owners*rounds)
	}
	for i := 1; i < len(holds); i++ {
		prev, g := holds[i-1], holds[i]
		if g.Token() <= prev.Token() {
			t.Fatalf("hold %d has token %d after %d: tokens must strictly increase", i, g.Token(), prev.Token())
		}
		if g.Created <= prev.Created {
			t.Fatalf("hold %d (Created %d) came after one created later (%d): waiters must be served in order", i, g.Created, prev.Created)
		}
	}
	lockFree(t, b, b.NewLock(t, name(t)), "after every owner unlocked")
}

// lockSameOwnerWaits: a second Lock of the Service that holds waits until
// Unlock, then is a fresh hold with a higher token and another key.
func lockSameOwnerWaits(t *testing.T, b Backend) {
	l := b.NewLock(t, name(t))
	g1 := mustLock(t, b, l)
	second := start(func() (lock.Grant, error) { return l.Lock(b.ctx(t)) })
	if _, err := l.TryLock(b.ctx(t)); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock by the holder itself: %v, want ErrLockTaken", err)
	}
	notYet(t, second, "second Lock of the holding Service")
	ok(t, l.Unlock(b.ctx(t)), "Unlock")
	g2 := awaitOK(t, b, second, "second Lock")
	if g2.Token() <= g1.Token() || g2.Created == g1.Created || g2.Key == g1.Key {
		t.Fatalf("relock is not a fresh hold: %+v then %+v", g1, g2)
	}
	ok(t, l.Release(b.ctx(t), g2), "Release")
}

// lockTry: TryLock takes a free lock, and fails at once with ErrLockTaken
// while anyone holds it, the holder included; failed tries leave nothing.
func lockTry(t *testing.T, b Backend) {
	a, c := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	g, err := a.TryLock(ctx)
	ok(t, err, "TryLock of a free lock")
	errIs(t, takeErr(c.TryLock(ctx)), lock.ErrLockTaken, "TryLock of a held lock")
	errIs(t, takeErr(a.TryLock(ctx)), lock.ErrLockTaken, "TryLock by the holder")
	ok(t, a.Release(ctx, g), "Release")
	g2, err := c.TryLock(ctx)
	ok(t, err, "TryLock after the failed tries and the release")
	if g2.Token() <= g.Token() {
		t.Fatalf("token %d after %d", g2.Token(), g.Token())
	}
	ok(t, c.Unlock(ctx), "Unlock")
}

// lockFree checks that l's TryLock succeeds now (nobody holds or waits: in
// particular nothing was left behind), and releases.
func lockFree(t *testing.T, b Backend, l lock.Service, when string) {
	t.Helper()
	ctx := b.ctx(t)
	g, err := l.TryLock(ctx)
	ok(t, err, "TryLock "+when)
	ok(t, l.Release(ctx, g), "Release")
}

func takeErr[T any](_ T, err error) error { return err }

// lockNotHeld: Unlock and Release fail with ErrNotHeld when the hold is not
// this Service's; a retried Release never frees a later hold.
func lockNotHeld(t *testing.T, b Backend) {
	l, other := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	errIs(t, l.Unlock(ctx), lock.ErrNotHeld, "Unlock of a free lock")
	errIs(t, l.Release(ctx, lock.Grant{}), lock.ErrNotHeld, "Release of a zero grant")
	g1 := mustLock(t, b, l)
	ok(t, l.Unlock(ctx), "Unlock")
	errIs(t, l.Unlock(ctx), lock.ErrNotHeld, "second Unlock")
	g2 := mustLock(t, b, l)
	if g2.Token() <= g1.Token() || g2.Created == g1.Created {
		t.Fatalf("relock reused a token or Created: %+v then %+v", g1, g2)
	}
	errIs(t, l.Release(ctx, g1), lock.ErrNotHeld, "Release of an ended grant")
	errIs(t, takeErr(other.TryLock(ctx)), lock.ErrLockTaken, "TryLock after a stale Release (the hold must be intact)")
	ok(t, l.Release(ctx, g2), "Release of the held grant")
	errIs(t, l.Release(ctx, g2), lock.ErrNotHeld, "retried Release")
	g3, err := other.TryLock(ctx)
	ok(t, err, "TryLock after the Release")
	errIs(t, l.Release(ctx, g2), lock.ErrNotHeld, "Release of an ended grant while another owner holds")
	errIs(t, takeErr(l.TryLock(ctx)), lock.ErrLockTaken, "TryLock after a stale Release (the other hold must be intact)")
	ok(t, other.Release(ctx, g3), "Release")
}

// lockReleaseCreated: Release names the grant by Created alone: the held
// key and token with a zero Created, or with an ended grant's, release
// nothing; the held grant's Created alone, its other fields zero, releases
// it.
func lockReleaseCreated(t *testing.T, b Backend) {
	l, other := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	g1 := mustLock(t, b, l)
	ok(t, l.Unlock(ctx), "Unlock")
	g2 := mustLock(t, b, l)
	zero := g2
	zero.Created = 0
	errIs(t, l.Release(ctx, zero), lock.ErrNotHeld, "Release of the held key and token with a zero Created")
	ended := g2
	ended.Created = g1.Created
	errIs(t, l.Release(ctx, ended), lock.ErrNotHeld, "Release of the held key and token with an ended grant's Created")
	errIs(t, takeErr(other.TryLock(ctx)), lock.ErrLockTaken, "TryLock after Releases that named no held grant")
	ok(t, l.Release(ctx, lock.Grant{Created: g2.Created}), "Release of the held grant named by its Created alone")
	mustLock(t, b, other)
}

// lockCancelled: a Lock whose context ends while it waits returns ctx.Err(),
// leaves nothing behind that would block the owners after it, and keeps the
// Service usable.
func lockCancelled(t *testing.T, b Backend) {
	a, w, c := b.NewLock(t, name(t)), b.NewLock(t, name(t)), b.NewLock(t, name(t))
	mustLock(t, b, a)
	wctx, cancel := context.WithTimeout(b.ctx(t), brief)
	defer cancel()
	_, err := w.Lock(wctx)
	isCtxErr(t, err, context.DeadlineExceeded, "Lock whose deadline passes while it waits")
	wantAlive(t, w, "after its Lock's deadline passed")
	ok(t, a.Unlock(b.ctx(t)), "Unlock")
	lockFree(t, b, c, "after the holder unlocked and the waiter gave up")
	lockFree(t, b, w, "by the waiter that gave up")
}

// lockEvents: a subscription gets Acquired and Released for each hold, in
// order, naming the grant; only events after Subscribe returns; and its
// channel closes when its context ends.
func lockEvents(t *testing.T, b Backend) {
	l := b.NewLock(t, name(t))
	ctx := b.ctx(t)
	events := l.Subscribe(ctx)
	g1 := mustLock(t, b, l)
	wantAcquired(t, b, events, lockHold(g1))
	late := l.Subscribe(ctx)
	ok(t, l.Unlock(ctx), "Unlock")
	wantReleased(t, b, events, lockHold(g1))
	wantReleased(t, b, late, lockHold(g1)) // and not the Acquired before it
	g2, err := l.TryLock(ctx)
	ok(t, err, "TryLock")
	wantAcquired(t, b, events, lockHold(g2))
	ok(t, l.Release(ctx, g2), "Release")
	wantReleased(t, b, events, lockHold(g2))

	sctx, stop := context.WithCancel(ctx)
	sub := l.Subscribe(sctx)
	stop()
	drainedClosed(t, b, sub, "Subscribe channel after its context ended")
	wantAlive(t, l, "after a subscription ended")
}

// lockSlowSubscriber: a subscriber that does not read never stalls the
// service, and still gets every Acquired and Released, in order.
func lockSlowSubscriber(t *testing.T, b Backend) {
	const cycles = 20
	l := b.NewLock(t, name(t))
	ctx := b.ctx(t)
	events := l.Subscribe(ctx)
	var grants []lock.Grant
	for range cycles {
		g := mustLock(t, b, l)
		grants = append(grants, g)
		ok(t, l.Unlock(ctx), "Unlock")
	}
	for _, g := range grants {
		wantAcquired(t, b, events, lockHold(g))
		wantReleased(t, b, events, lockHold(g))
	}
}

// lockClose: Close releases the hold at once (its subscribers see Released,
// then their channels close), so the next owner does not wait for a TTL, and
// also withdraws a waiting Lock; afterwards the Service is done with
// ErrClosed and every call fails wrapping it.
func lockClose(t *testing.T, b Backend) {
	a, w := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	events := a.Subscribe(ctx)
	ga := mustLock(t, b, a)
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	gw := closeHolder(t, b, a, events, lockHold(ga), waiter)
	increasing(t, "closed holder then waiter", ga.Token(), gw.Token())
	errIs(t, takeErr(a.Lock(ctx)), primitives.ErrClosed, "Lock after Close")
	errIs(t, takeErr(a.TryLock(ctx)), primitives.ErrClosed, "TryLock after Close")
	errIs(t, a.Unlock(ctx), primitives.ErrClosed, "Unlock after Close")
	errIs(t, a.Release(ctx, ga), primitives.ErrClosed, "Release after Close")
	errIs(t, a.Close(), primitives.ErrClosed, "second Close")

	// A holder's Close has released in the backend by the time it returns.
	ok(t, w.Close(), "Close of the second holder")
	c := b.NewLock(t, name(t))
	gc, err := c.TryLock(ctx)
	ok(t, err, "TryLock right after the holder's Close returned")

	// Close of a waiter withdraws it: it keeps nobody waiting.
	d, e := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	waiting := start(func() (lock.Grant, error) { return d.Lock(ctx) })
	ok(t, d.Close(), "Close of a waiter")
	if _, err := await(t, b, waiting, "waiting Lock of a closed Service"); err == nil {
		t.Fatal("a closed Service's waiting Lock acquired")
	}
	ok(t, c.Release(ctx, gc), "Release")
	lockFree(t, b, e, "after the waiter closed and the holder released")
}

// lockConcurrentCloses: see concurrentCloses; the next owner's TryLock
// succeeds.
func lockConcurrentCloses(t *testing.T, b Backend) {
	ctx := b.ctx(t)
	a := b.NewLock(t, name(t))
	mustLock(t, b, a)
	// Made first: making one takes a session, time in which a Close would
	// finish.
	next := []lock.Service{b.NewLock(t, name(t)), b.NewLock(t, name(t))}
	concurrentCloses(t, b, a, func(i int) error {
		g, err := next[i].TryLock(ctx)
		if err != nil {
			return fmt.Errorf("TryLock: %w", err)
		}
		return next[i].Release(ctx, g)
	})
}

// lockKillSession: when the holder's session dies, the hold ends with Lost,
// Do's fn sees its context cancelled with a cause wrapping ErrLost, Do
// returns fn's error joined with ErrLost, the Service is done and every
// later call fails wrapping ErrLost; the waiter takes over with a higher
// token, and a guard rejects the old holder.
func lockKillSession(t *testing.T, b Backend) {
	h, w := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	do := startHeld(t, b, h, func(fn func(context.Context, lock.Grant) error) error { return lock.Do(ctx, h, fn) })
	gh := do.grant
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	b.KillSession(t, h)
	wantAcquiredLost(t, b, do.events, lockHold(gh))
	do.wantLost(t, b)
	wantEnded(t, b, h, primitives.ErrLost)
	errIs(t, takeErr(h.Lock(ctx)), primitives.ErrLost, "Lock after loss")
	errIs(t, takeErr(h.TryLock(ctx)), primitives.ErrLost, "TryLock after loss")
	errIs(t, h.Unlock(ctx), primitives.ErrLost, "Unlock after loss")
	errIs(t, h.Release(ctx, gh), primitives.ErrLost, "Release after loss")
	ok(t, h.Close(), "Close after loss")
	errIs(t, h.Close(), primitives.ErrClosed, "a second Close after loss")
	errIs(t, h.Err(), primitives.ErrLost, "Err after the Close of a lost Service")

	gw := awaitOK(t, b, waiter, "waiter's Lock after the holder's session died")
	fenced(t, do.gd, gh.Token(), gw.Token())
}

func lockUnlockRacingLoss(t *testing.T, b Backend) {
	for i := range 20 {
		l := b.NewLock(t, fmt.Sprintf("%s-%d", name(t), i))
		ctx := b.ctx(t)
		events := l.Subscribe(ctx)
		g := mustLock(t, b, l)
		wantAcquired(t, b, events, lockHold(g))
		done := startErr(func() error { return l.Unlock(ctx) })
		b.KillSession(t, l)
		_, uerr := await(t, b, done, "Unlock")
		var got []primitives.Event
		for e := range events {
			if _, suspended := e.(primitives.Suspended); !suspended {
				got = append(got, e)
			}
		}
		if len(got) != 1 {
			t.Fatalf("round %d: events after an Unlock racing the session's loss: %#v (Unlock: %v), want exactly one", i, got, uerr)
		}
		switch e := got[0].(type) {
		case primitives.Released:
			ok(t, uerr, fmt.Sprintf("round %d: Unlock whose hold was Released", i))
		case primitives.Lost:
			errIs(t, uerr, primitives.ErrLost, fmt.Sprintf("round %d: Unlock whose hold was Lost (%v)", i, e.Err))
		default:
			t.Fatalf("round %d: %#v", i, e)
		}
	}
}

// fenced checks a guard that admitted a zombie's token: it admits the
// successor's higher token and then rejects the zombie's.
func fenced(t *testing.T, gd *guard.Guard, zombie, successor fencing.Token) {
	t.Helper()
	if successor <= zombie {
		t.Fatalf("successor's token %d not above the previous holder's %d", successor, zombie)
	}
	ok(t, gd.Check(successor), "guard admits the successor")
	errIs(t, gd.Check(zombie), fencing.ErrTokenStale, "guard given the previous holder's token")
}

// lockKillWaiter: a waiter whose session dies stops waiting with ErrLost and
// leaves nothing behind.
func lockKillWaiter(t *testing.T, b Backend) {
	h, w, c := b.NewLock(t, name(t)), b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	mustLock(t, b, h)
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	b.KillSession(t, w)
	_, err := await(t, b, waiter, "Lock of a waiter whose session died")
	errIs(t, err, primitives.ErrLost, "Lock of a waiter whose session died")
	wantEnded(t, b, w, primitives.ErrLost)
	ok(t, h.Unlock(ctx), "Unlock")
	lockFree(t, b, c, "after the dead waiter")
}

// lockDeleteKey: when the hold's key is deleted behind its back, the hold
// ends with Lost and Do's context is cancelled, but the Service stays usable;
// the next hold, of another owner or this one, has a higher token, and a
// guard rejects the old one.
func lockDeleteKey(t *testing.T, b Backend) {
	h, o := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	do := startHeld(t, b, h, func(fn func(context.Context, lock.Grant) error) error { return lock.Do(ctx, h, fn) })
	gh := do.grant
	b.DeleteKey(t, gh.Key)
	do.wantLost(t, b)
	wantAcquiredLost(t, b, do.events, lockHold(gh))
	wantAlive(t, h, "after only its key was deleted")
	errIs(t, h.Unlock(ctx), lock.ErrNotHeld, "Unlock of the lost hold")
	errIs(t, h.Release(ctx, gh), lock.ErrNotHeld, "Release of the lost hold")

	gs := mustLock(t, b, o)
	fenced(t, do.gd, gh.Token(), gs.Token())
	ok(t, o.Unlock(ctx), "Unlock")
	g2 := mustLock(t, b, h)
	if g2.Token() <= gs.Token() {
		t.Fatalf("token %d after %d", g2.Token(), gs.Token())
	}
	wantAcquired(t, b, do.events, lockHold(g2))
	ok(t, h.Unlock(ctx), "Unlock")
}

// lockDo: Do runs fn with the grant, releases after fn, and returns fn's
// error alone; a Lock that fails is returned and fn is not called.
func lockDo(t *testing.T, b Backend) {
	l, o := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	var got lock.Grant
	err := lock.Do(ctx, l, func(fctx context.Context, g lock.Grant) error {
		got = g
		if _, err := o.TryLock(fctx); !errors.Is(err, lock.ErrLockTaken) {
			t.Errorf("TryLock while Do's fn runs: %v, want ErrLockTaken", err)
		}
		return errFn
	})
	if !errors.Is(err, errFn) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do = %v, want fn's error alone", err)
	}
	if got.Created == 0 || got.Key == "" {
		t.Fatalf("fn got grant %+v", got)
	}
	errIs(t, l.Release(ctx, got), lock.ErrNotHeld, "Release after Do returned")
	g, err := o.TryLock(ctx)
	ok(t, err, "TryLock after Do returned")

	called := false
	dctx, cancel := context.WithTimeout(ctx, brief)
	defer cancel()
	err = lock.Do(dctx, l, func(context.Context, lock.Grant) error { called = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || called {
		t.Fatalf("Do on a held lock past its deadline = %v (fn called: %v), want DeadlineExceeded and no fn", err, called)
	}
	ok(t, o.Release(ctx, g), "Release")
}

// lockPause: a holder paused past its TTL is replaced by a successor with a
// higher token; a guard then rejects the paused holder's token, and once it
// resumes it sees Lost and is done.
func lockPause(t *testing.T, b Backend) {
	h, w := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	gd := guard.New()
	events := h.Subscribe(ctx)
	gh := mustLock(t, b, h)
	ok(t, gd.Check(gh.Token()), "guard admits the holder")
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	resume := b.pause(t, h)
	gw := awaitOK(t, b, waiter, "waiter's Lock while the holder is paused")
	fenced(t, gd, gh.Token(), gw.Token())
	resume()
	wantAcquiredLost(t, b, events, lockHold(gh))
	wantEnded(t, b, h, primitives.ErrLost)
	errIs(t, h.Unlock(ctx), primitives.ErrLost, "Unlock after the paused session expired")
	ok(t, w.Unlock(ctx), "Unlock")
}

// lockGrantTokenNow: a GrantToken following a lock stamps exactly while
// the caller may act on the grant: from Lock's return until Unlock's, and
// not once lock.Do has ended fn's context for a loss. A client that stamps
// through it sends its first request right after Lock, and none after.
func lockGrantTokenNow(t *testing.T, b Backend) {
	l := b.NewLock(t, name(t))
	ctx := b.ctx(t)
	src := primitives.FollowGrants(ctx, name(t), l)
	for i := range 20 {
		g := mustLock(t, b, l)
		if tok := src.Token(); tok != g.Token() {
			t.Fatalf("cycle %d: token %d right after Lock returned grant %d", i, tok, g.Token())
		}
		ok(t, l.Unlock(ctx), "Unlock")
		if tok := src.Token(); tok != 0 {
			t.Fatalf("cycle %d: token %d right after Unlock returned", i, tok)
		}
	}
	stamped := make(chan fencing.Token, 1)
	err := lock.Do(ctx, l, func(fctx context.Context, g lock.Grant) error {
		if tok := src.Token(); tok != g.Token() {
			t.Errorf("token %d inside Do, want the grant's %d", tok, g.Token())
		}
		b.KillSession(t, l)
		<-fctx.Done()
		stamped <- src.Token()
		return nil
	})
	errIs(t, err, primitives.ErrLost, "Do whose session died")
	if tok := <-stamped; tok != 0 {
		t.Fatalf("token %d once Do's context ended for the loss", tok)
	}
}

// lockEndedContext: Unlock and Release given a context that has already
// ended release nothing and return the context's error; the hold stands.
func lockEndedContext(t *testing.T, b Backend) {
	l, other := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	g := mustLock(t, b, l)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	errIs(t, l.Unlock(ended), context.Canceled, "Unlock with an ended context")
	errIs(t, l.Release(ended, g), context.Canceled, "Release with an ended context")
	errIs(t, takeErr(other.TryLock(ctx)), lock.ErrLockTaken, "TryLock after calls with an ended context (the hold must stand)")
	ok(t, l.Release(ctx, g), "Release")
}
