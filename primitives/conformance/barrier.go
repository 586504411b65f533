package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
)

// BarrierBackend is a Backend that offers barriers and double barriers. Its
// KillSession hook accepts the parties NewDoubleBarrier makes.
type BarrierBackend struct {
	Backend
	// NewBarrier makes a NEW user of the barrier name (with its own client
	// where the backend needs one) and registers its cleanup with
	// t.Cleanup.
	NewBarrier func(t *testing.T, name string) barrier.Barrier
	// NewDoubleBarrier makes a NEW party, with its own session, of the
	// double barrier name for count parties, and registers its Close with
	// t.Cleanup.
	NewDoubleBarrier func(t *testing.T, name string, count int) barrier.DoubleBarrier
	// BarrierKeys lists every key (znode, Redis key) the backend keeps for
	// the barrier or double barrier name at the moment.
	BarrierKeys func(t *testing.T, name string) []string
}

func (b BarrierBackend) checkBarriers(t *testing.T) {
	t.Helper()
	b.check(t)
	if b.NewBarrier == nil || b.NewDoubleBarrier == nil || b.BarrierKeys == nil {
		t.Fatalf("conformance: backend %q lacks NewBarrier, NewDoubleBarrier or BarrierKeys", b.Name)
	}
}

// TestBarrier checks the promises of barrier.Barrier against b, one
// parallel subtest per law:
//
//   - WaitUnheld: Wait returns at once on a barrier never held, and on one
//     held and released.
//   - WaitBlocksWhileHeld: Wait blocks while the barrier is held, and every
//     waiter returns at its Release.
//   - HoldTwice: a second Hold, by the holder or anyone, fails with ErrHeld.
//   - ReleaseByAnyone: any user may Release; a second Release fails with
//     ErrNotHeld.
//   - CancelledWaitLeavesNothing: a Wait whose ctx ends returns ctx.Err();
//     after the Release nothing of the barrier is left in the store.
//   - NilContext: Hold, Release and Wait given a nil context fail with
//     ErrInvalidArgument and change nothing.
func TestBarrier(t *testing.T, b BarrierBackend) {
	t.Helper()
	b.checkBarriers(t)
	law(t, "WaitUnheld", func(t *testing.T) { barrierWaitUnheld(t, b) })
	law(t, "WaitBlocksWhileHeld", func(t *testing.T) { barrierWaitBlocks(t, b) })
	law(t, "HoldTwice", func(t *testing.T) { barrierHoldTwice(t, b) })
	law(t, "ReleaseByAnyone", func(t *testing.T) { barrierReleaseByAnyone(t, b) })
	law(t, "CancelledWaitLeavesNothing", func(t *testing.T) { barrierCancelledWait(t, b) })
	law(t, "NilContext", func(t *testing.T) { barrierNilContext(t, b) })
}

// TestDoubleBarrier checks the promises of barrier.DoubleBarrier against b,
// one parallel subtest per law:
//
//   - EnterTogether: Enter blocks until Count parties have entered, then
//     every one returns.
//   - Full: the Count+1-th party is refused with ErrFull and not counted;
//     so is a newcomer while a party of the complete round is still in
//     (another one closed): it does not complete a round of its own with
//     the round's leftovers.
//   - EnterTwice: a second Enter fails with ErrEntered; Leave before Enter
//     with ErrNotEntered.
//   - LeaveTogether: Leave blocks until every party that entered has left.
//   - PartyDies: a party whose session is lost is gone from the barrier
//     with its key; the others leave without it.
//   - LastLeaverCleans: once every party has left, nothing the barrier
//     created is left in the store; nor once every party of an entered
//     round has closed without leaving.
//   - CancelledEnterLeavesNothing: an Enter whose ctx ends returns
//     ctx.Err() and is not counted: Count other parties then enter
//     together.
//   - NilContext: Enter and Leave given a nil context fail with
//     ErrInvalidArgument and are not counted.
func TestDoubleBarrier(t *testing.T, b BarrierBackend) {
	t.Helper()
	b.checkBarriers(t)
	law(t, "EnterTogether", func(t *testing.T) { dbEnterTogether(t, b) })
	law(t, "Full", func(t *testing.T) { dbFull(t, b) })
	law(t, "EnterTwice", func(t *testing.T) { dbEnterTwice(t, b) })
	law(t, "LeaveTogether", func(t *testing.T) { dbLeaveTogether(t, b) })
	law(t, "PartyDies", func(t *testing.T) { dbPartyDies(t, b) })
	law(t, "LastLeaverCleans", func(t *testing.T) { dbLastLeaverCleans(t, b) })
	law(t, "CancelledEnterLeavesNothing", func(t *testing.T) { dbCancelledEnter(t, b) })
	law(t, "NilContext", func(t *testing.T) { dbNilContext(t, b) })
}

// briefly returns a context that ends after brief, for a call the law wants
// to end while it waits.
func briefly(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, brief)
}

func barrierWaitUnheld(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	x := b.NewBarrier(t, name(t))
	wctx, cancel := context.WithTimeout(ctx, b.prompt())
	defer cancel()
	ok(t, x.Wait(wctx), "Wait on a barrier never held")
	ok(t, x.Hold(ctx), "Hold")
	ok(t, x.Release(ctx), "Release")
	ok(t, x.Wait(wctx), "Wait on a released barrier")
}

func barrierWaitBlocks(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	holder := b.NewBarrier(t, name(t))
	ok(t, holder.Hold(ctx), "Hold")
	const waiters = 3
	var done []<-chan outcome[struct{}]
	for range waiters {
		w := b.NewBarrier(t, name(t))
		done = append(done, startErr(func() error { return w.Wait(ctx) }))
	}
	probe := b.NewBarrier(t, name(t))
	pctx, cancel := briefly(ctx)
	defer cancel()
	isCtxErr(t, probe.Wait(pctx), context.DeadlineExceeded, "Wait on a held barrier")
	for i, ch := range done {
		notYet(t, ch, fmt.Sprintf("waiter %d's Wait while held", i))
	}
	ok(t, holder.Release(ctx), "Release")
	for i, ch := range done {
		awaitOK(t, b.Backend, ch, fmt.Sprintf("waiter %d's Wait after the Release", i))
	}
}

func barrierHoldTwice(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	x, y := b.NewBarrier(t, name(t)), b.NewBarrier(t, name(t))
	ok(t, x.Hold(ctx), "Hold")
	errIs(t, x.Hold(ctx), barrier.ErrHeld, "the holder's second Hold")
	errIs(t, y.Hold(ctx), barrier.ErrHeld, "another user's Hold")
	ok(t, y.Release(ctx), "Release")
	ok(t, y.Hold(ctx), "Hold after the Release")
	ok(t, y.Release(ctx), "Release")
}

func barrierReleaseByAnyone(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	x, y := b.NewBarrier(t, name(t)), b.NewBarrier(t, name(t))
	errIs(t, y.Release(ctx), barrier.ErrNotHeld, "Release of a barrier never held")
	ok(t, x.Hold(ctx), "Hold")
	ok(t, y.Release(ctx), "another user's Release")
	errIs(t, x.Release(ctx), barrier.ErrNotHeld, "the holder's Release after it")
}

func barrierCancelledWait(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	x, w := b.NewBarrier(t, name(t)), b.NewBarrier(t, name(t))
	ok(t, x.Hold(ctx), "Hold")
	wctx, cancel := briefly(ctx)
	defer cancel()
	isCtxErr(t, w.Wait(wctx), context.DeadlineExceeded, "a Wait whose ctx ends")
	cctx, cancelNow := context.WithCancel(ctx)
	cancelNow()
	isCtxErr(t, w.Wait(cctx), context.Canceled, "a Wait with a cancelled ctx")
	ok(t, x.Release(ctx), "Release")
	noKeys(t, b, "after the Release")
}

// noKeys fails t unless the store keeps nothing for the test's name.
func noKeys(t *testing.T, b BarrierBackend, when string) {
	t.Helper()
	var left []string
	eventually(t, b.Backend, "the barrier's keys to go "+when, func() bool {
		left = b.BarrierKeys(t, name(t))
		return len(left) == 0
	})
}

// parties makes n parties of the test's double barrier for count.
func parties(t *testing.T, b BarrierBackend, n, count int) []barrier.DoubleBarrier {
	ps := make([]barrier.DoubleBarrier, n)
	for i := range ps {
		ps[i] = b.NewDoubleBarrier(t, name(t), count)
	}
	return ps
}

// enterAll has every party of ps Enter at once and waits for all.
func enterAll(t *testing.T, b BarrierBackend, ctx context.Context, ps []barrier.DoubleBarrier) {
	t.Helper()
	var chs []<-chan outcome[struct{}]
	for _, p := range ps {
		chs = append(chs, startErr(func() error { return p.Enter(ctx) }))
	}
	for i, ch := range chs {
		awaitOK(t, b.Backend, ch, fmt.Sprintf("party %d's Enter", i))
	}
}

// leaveAll has every party of ps Leave at once and waits for all.
func leaveAll(t *testing.T, b BarrierBackend, ctx context.Context, ps []barrier.DoubleBarrier) {
	t.Helper()
	var chs []<-chan outcome[struct{}]
	for _, p := range ps {
		chs = append(chs, startErr(func() error { return p.Leave(ctx) }))
	}
	for i, ch := range chs {
		awaitOK(t, b.Backend, ch, fmt.Sprintf("party %d's Leave", i))
	}
}

func dbEnterTogether(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	const count = 3
	ps := parties(t, b, count, count)
	if got := ps[0].Count(); got != count {
		t.Fatalf("Count() = %d, want %d", got, count)
	}
	// With parties missing nobody enters: an Enter gives up at its ctx's
	// end, uncounted, and may be called again.
	pctx, cancel := briefly(ctx)
	defer cancel()
	isCtxErr(t, ps[0].Enter(pctx), context.DeadlineExceeded, "Enter with parties missing")
	first := startErr(func() error { return ps[0].Enter(ctx) })
	second := startErr(func() error { return ps[1].Enter(ctx) })
	notYet(t, first, "party 0's Enter with a party missing")
	notYet(t, second, "party 1's Enter with a party missing")
	ok(t, ps[2].Enter(ctx), "the last party's Enter")
	awaitOK(t, b.Backend, first, "party 0's Enter")
	awaitOK(t, b.Backend, second, "party 1's Enter")
	leaveAll(t, b, ctx, ps)
}

func dbFull(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	const count = 2
	ps := parties(t, b, count, count)
	enterAll(t, b, ctx, ps)
	extra := b.NewDoubleBarrier(t, name(t), count)
	errIs(t, extra.Enter(ctx), barrier.ErrFull, "the Count+1-th Enter")
	errIs(t, extra.Leave(ctx), barrier.ErrNotEntered, "the refused party's Leave")
	ok(t, ps[0].Close(), "Close of a party of the complete round")
	newcomer := b.NewDoubleBarrier(t, name(t), count)
	errIs(t, newcomer.Enter(ctx), barrier.ErrFull, "a newcomer's Enter while a party of the complete round is in")
	leaveAll(t, b, ctx, ps[1:])
	noKeys(t, b, "after every counted party left (the refused one included nothing)")
}

func dbEnterTwice(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	ps := parties(t, b, 1, 1)
	errIs(t, ps[0].Leave(ctx), barrier.ErrNotEntered, "Leave before Enter")
	ok(t, ps[0].Enter(ctx), "Enter of a one-party barrier")
	errIs(t, ps[0].Enter(ctx), barrier.ErrEntered, "a second Enter")
	ok(t, ps[0].Leave(ctx), "Leave")
}

func dbLeaveTogether(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	const count = 3
	ps := parties(t, b, count, count)
	enterAll(t, b, ctx, ps)
	lctx, cancel := briefly(ctx)
	defer cancel()
	isCtxErr(t, ps[0].Leave(lctx), context.DeadlineExceeded, "Leave while the others stay")
	// Leave may be called again after its ctx ended.
	first := startErr(func() error { return ps[0].Leave(ctx) })
	second := startErr(func() error { return ps[1].Leave(ctx) })
	notYet(t, first, "party 0's Leave while party 2 stays")
	notYet(t, second, "party 1's Leave while party 2 stays")
	ok(t, ps[2].Leave(ctx), "the last party's Leave")
	awaitOK(t, b.Backend, first, "party 0's Leave")
	awaitOK(t, b.Backend, second, "party 1's Leave")
}

func dbPartyDies(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	const count = 3
	ps := parties(t, b, count, count)
	enterAll(t, b, ctx, ps)
	// The first party to have entered is killed: on some layouts it is the
	// one the others wait for.
	dead := ps[0]
	b.KillSession(t, dead)
	closed(t, b.Backend, dead.Done(), "the dead party's Done")
	errIs(t, dead.Err(), primitives.ErrLost, "the dead party's Err")
	if err := dead.Leave(ctx); err == nil {
		t.Fatal("the dead party's Leave succeeded")
	}
	leaveAll(t, b, ctx, ps[1:])
	noKeys(t, b, "after the live parties left")
}

func dbLastLeaverCleans(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	const count = 2
	for round := range 2 {
		ps := parties(t, b, count, count)
		enterAll(t, b, ctx, ps)
		leaveAll(t, b, ctx, ps)
		noKeys(t, b, fmt.Sprintf("after round %d", round))
		for _, p := range ps {
			if err := p.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
				t.Fatalf("Close after leaving: %v", err)
			}
		}
	}
	ps := parties(t, b, count, count)
	enterAll(t, b, ctx, ps)
	for i, p := range ps {
		ok(t, p.Close(), fmt.Sprintf("party %d's Close, entered, without Leave", i))
	}
	noKeys(t, b, "after every party of an entered round closed without leaving")
}

func dbCancelledEnter(t *testing.T, b BarrierBackend) {
	ctx := b.ctx(t)
	const count = 2
	quitter := b.NewDoubleBarrier(t, name(t), count)
	qctx, cancel := briefly(ctx)
	defer cancel()
	isCtxErr(t, quitter.Enter(qctx), context.DeadlineExceeded, "an Enter alone whose ctx ends")
	ps := parties(t, b, count, count)
	enterAll(t, b, ctx, ps) // the quitter, not counted, leaves room for both
	leaveAll(t, b, ctx, ps)
	ok(t, quitter.Close(), "the quitter's Close")
	noKeys(t, b, "after the parties left and the quitter closed")
}
