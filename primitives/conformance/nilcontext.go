package conformance

import (
	"context"
	"errors"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// A nil context is bad input like any other: every call given one fails
// with an error wrapping primitives.ErrInvalidArgument (a call that returns
// only a channel returns one closed at once), panics nowhere, writes
// nothing and changes no hold. The laws below pass a variable, not the nil
// literal, as a user's code that forgot to set one would.
var noContext context.Context

// nilErr checks that err wraps ErrInvalidArgument for a call given a nil
// context.
func nilErr(t *testing.T, err error, call string) {
	t.Helper()
	errIs(t, err, primitives.ErrInvalidArgument, call+" with a nil context")
}

// nilClosed checks that ch, returned for a nil context, is closed without
// sending anything.
func nilClosed[E any](t *testing.T, b Backend, ch <-chan E, call string) {
	t.Helper()
	readUntil(t, b, ch, call+" with a nil context to close", func(e E) bool {
		t.Fatalf("%s with a nil context sent %+v", call, e)
		return true
	})
}

// notRun is a Do's fn that must not run.
func notRun[G any](t *testing.T, call string) func(context.Context, G) error {
	return func(context.Context, G) error {
		t.Errorf("%s with a nil context ran fn", call)
		return nil
	}
}

func lockNilContext(t *testing.T, b Backend) {
	l, other := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	nilErr(t, takeErr(l.Lock(noContext)), "Lock")
	nilErr(t, takeErr(l.TryLock(noContext)), "TryLock")
	nilErr(t, lock.Do(noContext, l, notRun[lock.Grant](t, "lock.Do")), "lock.Do")
	nilClosed(t, b, l.Subscribe(noContext), "Subscribe")
	lockFree(t, b, other, "after acquisitions with a nil context (they must leave nothing)")
	g := mustLock(t, b, l)
	nilErr(t, l.Unlock(noContext), "Unlock")
	nilErr(t, l.Release(noContext, g), "Release")
	errIs(t, takeErr(other.TryLock(ctx)), lock.ErrLockTaken, "TryLock after releases with a nil context (the hold must stand)")
	ok(t, l.Release(ctx, g), "Release")
}

func rwNilContext(t *testing.T, b Backend) {
	a, other := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	nilErr(t, takeErr(a.RLock(noContext)), "RLock")
	nilErr(t, takeErr(a.TryRLock(noContext)), "TryRLock")
	nilErr(t, takeErr(a.Lock(noContext)), "Lock")
	nilErr(t, takeErr(a.TryLock(noContext)), "TryLock")
	nilErr(t, rwlock.DoRead(noContext, a, notRun[rwlock.Grant](t, "rwlock.DoRead")), "rwlock.DoRead")
	nilErr(t, rwlock.DoWrite(noContext, a, notRun[rwlock.Grant](t, "rwlock.DoWrite")), "rwlock.DoWrite")
	nilClosed(t, b, a.Subscribe(noContext), "Subscribe")
	rwFree(t, b, other, "after acquisitions with a nil context (they must leave nothing)")
	g := mustRLock(t, b, a)
	nilErr(t, a.RUnlock(noContext), "RUnlock")
	nilErr(t, a.Release(noContext, g), "Release of a read grant")
	errIs(t, takeErr(other.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock after releases with a nil context (the read grant must stand)")
	ok(t, a.RUnlock(ctx), "RUnlock")
	g = mustWLock(t, b, a)
	nilErr(t, a.Unlock(noContext), "Unlock")
	nilErr(t, a.Release(noContext, g), "Release of a write grant")
	errIs(t, takeErr(other.TryRLock(ctx)), rwlock.ErrRWLockTaken, "TryRLock after releases with a nil context (the write grant must stand)")
	ok(t, a.Release(ctx, g), "Release")
}

func electNilContext(t *testing.T, b Backend) {
	e, other := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	nilErr(t, e.Campaign(noContext, "v"), "Campaign")
	nilErr(t, election.Lead(noContext, e, "v", notRun[election.Leadership](t, "election.Lead")), "election.Lead")
	nilErr(t, takeErr(e.Leader(noContext)), "Leader")
	nilClosed(t, b, e.Observe(noContext), "Observe")
	nilClosed(t, b, e.Subscribe(noContext), "Subscribe")
	if _, err := other.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader after Campaigns with a nil context: %v, want ErrNoLeader (they must leave nothing)", err)
	}
	l := mustCampaign(t, b, e, "kept")
	nilErr(t, e.Proclaim(noContext, "changed"), "Proclaim")
	nilErr(t, e.Resign(noContext), "Resign")
	if tr, isResigner := e.(election.TermResigner); isResigner {
		nilErr(t, tr.ResignTerm(noContext, l), "ResignTerm")
	}
	if ld, err := other.Leader(ctx); err != nil || !sameTerm(ld, l) || ld.Value != "kept" {
		t.Fatalf("Leader after calls with a nil context = %+v, %v; want %+v", ld, err, l)
	}
	ok(t, e.Resign(ctx), "Resign")
}

func semNilContext(t *testing.T, b SemaphoreBackend) {
	a, c := b.sem(t, 1), b.sem(t, 1)
	ctx := b.ctx(t)
	nilErr(t, takeErr(a.Acquire(noContext)), "Acquire")
	nilErr(t, takeErr(a.TryAcquire(noContext)), "TryAcquire")
	nilErr(t, semaphore.Do(noContext, a, notRun[semaphore.Grant](t, "semaphore.Do")), "semaphore.Do")
	nilClosed(t, b.Backend, a.Subscribe(noContext), "Subscribe")
	g, err := c.TryAcquire(ctx)
	ok(t, err, "TryAcquire after acquisitions with a nil context (they must leave nothing)")
	ok(t, c.Release(ctx, g), "Release")
	g, err = a.Acquire(ctx)
	ok(t, err, "Acquire")
	nilErr(t, a.Release(noContext, g), "Release")
	_, err = c.TryAcquire(ctx)
	errIs(t, err, semaphore.ErrNoPermit, "TryAcquire after a Release with a nil context (the grant must stand)")
	ok(t, a.Release(ctx, g), "Release")
}

func barrierNilContext(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	x, y := b.NewBarrier(t, name(t)), b.NewBarrier(t, name(t))
	nilErr(t, x.Hold(noContext), "Hold")
	wctx, cancel := context.WithTimeout(ctx, b.prompt())
	defer cancel()
	ok(t, y.Wait(wctx), "Wait after a Hold with a nil context (the barrier must stay down)")
	ok(t, x.Hold(ctx), "Hold")
	nilErr(t, x.Release(noContext), "Release")
	nilErr(t, x.Wait(noContext), "Wait")
	errIs(t, y.Hold(ctx), barrier.ErrHeld, "Hold after a Release with a nil context (the barrier must stay raised)")
	ok(t, x.Release(ctx), "Release")
	noKeys(t, b, "after calls with a nil context")
}

func dbNilContext(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	ps := parties(t, b, 2, 2)
	nilErr(t, ps[0].Enter(noContext), "Enter")
	nilErr(t, ps[0].Leave(noContext), "Leave")
	enterAll(t, b, ctx, ps)
	nilErr(t, ps[0].Leave(noContext), "Leave of an entered party")
	leaveAll(t, b, ctx, ps)
	noKeys(t, b, "after calls with a nil context")
}
