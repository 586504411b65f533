package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// TestRWLock checks every promise of rwlock.Service, rwlock.DoRead and
// rwlock.DoWrite against b, one parallel subtest per law:
//
//   - ReadersShareWriterWaits: readers share a token; a writer waits for the
//     readers before it, and a later reader for the writer.
//   - SameOwnerWaits: a Service holds one grant at a time.
//   - NoUpgrade: a reading Service's Lock, from the goroutine that reads,
//     ends with its context and leaves the read grant as it was.
//   - WritersInOrder: a writer that queued before another asked acquires
//     first.
//   - ExclusionAndTokens: concurrent DoRead/DoWrite keep exclusion and every
//     token law.
//   - ReadEpochTokens: readers holding together, late ones too, share a token
//     above the writer before them and below the writer after them; one
//     guard fences both.
//   - TryAndNotHeld: ErrRWLockTaken at once; ErrNotHeld for grants not held,
//     of either mode.
//   - ReleaseMatchesCreated: a retried Release of an earlier read grant of the
//     same epoch (same token) frees nothing; zero Created never matches.
//   - CancelledLeavesNothing: RLock/Lock past their context return ctx.Err();
//     a withdrawn writer stops refusing readers at once.
//   - Events: Acquired and Released for read and write grants, in order, also
//     for a subscriber that does not read.
//   - CloseReleasesPromptly: the waiting writer does not wait for a TTL; then
//     ErrClosed everywhere.
//   - KillSessionOfWriter: Lost, DoWrite's context cancelled with ErrLost,
//     ErrLost everywhere; the next reader fences the zombie.
//   - KillSessionOfReaderThenWriter: the writer after the readers fences the
//     dead reader.
//   - KillSessionOfWaitingWriter: the waiting Lock fails with ErrLost and
//     stops refusing readers.
//   - DeleteKey: a read or write grant is lost, the Service stays usable.
//   - PausedReaderIsFenced: a writer takes over after the TTL; the paused
//     reader sees Lost when it resumes.
//   - CancelledAtAnyMoment: RLocks and Locks whose contexts end at any step
//     return ctx.Err() itself, and leave nothing.
//   - WaiterKeyDeleted: a waiting writer whose key is deleted fails with
//     ErrLost within half a TTL.
//   - BadNames: every bad name is refused with ErrInvalidArgument.
//   - EndedContextKeepsHold: RUnlock, Unlock and Release given a context
//     that has ended fail with its error and keep the grant.
//   - NilContext: every call, DoRead and DoWrite included, given a nil
//     context fails with ErrInvalidArgument (Subscribe: a channel closed
//     at once), writes nothing and keeps the grant.
func TestRWLock(t *testing.T, b Backend) {
	t.Helper()
	b.check(t)
	if b.NewRWLock == nil {
		t.Fatalf("conformance: backend %q has no NewRWLock", b.Name)
	}
	law(t, "ReadersShareWriterWaits", func(t *testing.T) { rwShare(t, b) })
	law(t, "SameOwnerWaits", func(t *testing.T) { rwSameOwner(t, b) })
	law(t, "NoUpgrade", func(t *testing.T) { rwNoUpgrade(t, b) })
	law(t, "WritersInOrder", func(t *testing.T) { rwWritersInOrder(t, b) })
	law(t, "ExclusionAndTokens", func(t *testing.T) { rwExclusion(t, b) })
	law(t, "ReadEpochTokens", func(t *testing.T) { rwEpochs(t, b) })
	law(t, "TryAndNotHeld", func(t *testing.T) { rwTry(t, b) })
	law(t, "ReleaseMatchesCreated", func(t *testing.T) { rwReleaseCreated(t, b) })
	law(t, "CancelledLeavesNothing", func(t *testing.T) { rwCancelled(t, b) })
	law(t, "Events", func(t *testing.T) { rwEvents(t, b) })
	law(t, "CloseReleasesPromptly", func(t *testing.T) { rwClose(t, b) })
	law(t, "KillSessionOfWriter", func(t *testing.T) { rwKillWriter(t, b) })
	law(t, "KillSessionOfReaderThenWriter", func(t *testing.T) { rwKillReader(t, b) })
	law(t, "KillSessionOfWaitingWriter", func(t *testing.T) { rwKillWaiter(t, b) })
	law(t, "DeleteKey", func(t *testing.T) { rwDeleteKey(t, b) })
	law(t, "PausedReaderIsFenced", func(t *testing.T) { rwPause(t, b) })
	law(t, "BadNames", func(t *testing.T) { badNames(t, b, "rwlock") })
	law(t, "CancelledAtAnyMoment", func(t *testing.T) { rwCancelledAnyMoment(t, b) })
	law(t, "WaiterKeyDeleted", func(t *testing.T) { rwWaiterKeyDeleted(t, b) })
	law(t, "EndedContextKeepsHold", func(t *testing.T) { rwEndedContext(t, b) })
	law(t, "NilContext", func(t *testing.T) { rwNilContext(t, b) })
}

func mustRLock(t *testing.T, b Backend, l rwlock.Service) rwlock.Grant {
	t.Helper()
	g, err := l.RLock(b.ctx(t))
	ok(t, err, "RLock")
	if g.Mode != rwlock.Read {
		t.Fatalf("RLock gave a %v grant", g.Mode)
	}
	return g
}

func mustWLock(t *testing.T, b Backend, l rwlock.Service) rwlock.Grant {
	t.Helper()
	g, err := l.Lock(b.ctx(t))
	ok(t, err, "Lock")
	if g.Mode != rwlock.Write {
		t.Fatalf("Lock gave a %v grant", g.Mode)
	}
	return g
}

// rwFree checks that l's TryLock succeeds now (nobody holds or waits), and
// releases.
func rwFree(t *testing.T, b Backend, l rwlock.Service, when string) {
	t.Helper()
	ctx := b.ctx(t)
	g, err := l.TryLock(ctx)
	ok(t, err, "TryLock "+when)
	ok(t, l.Release(ctx, g), "Release")
}

// writerQueued waits until a writer holds or waits, as seen through probe's
// TryRLock, which only a writer refuses. Whatever probe gets it gives back.
func writerQueued(t *testing.T, b Backend, probe rwlock.Service) {
	t.Helper()
	ctx := b.ctx(t)
	eventually(t, b, "a writer to queue", func() bool {
		g, err := probe.TryRLock(ctx)
		if errors.Is(err, rwlock.ErrRWLockTaken) {
			return true
		}
		ok(t, err, "TryRLock")
		ok(t, probe.Release(ctx, g), "Release")
		return false
	})
}

// rwShare: readers hold together with one token; a writer waits for every
// reader before it; a reader after a waiting writer waits for it (no
// writer starvation); tokens go up from readers to writer to reader.
func rwShare(t *testing.T, b Backend) {
	r1, r2, r3, w, probe := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	g1, g2 := mustRLock(t, b, r1), mustRLock(t, b, r2)
	if g1.Token() != g2.Token() {
		t.Fatalf("readers holding together got tokens %d and %d, want one", g1.Token(), g2.Token())
	}
	errIs(t, takeErr(probe.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock with readers holding")
	writer := start(func() (rwlock.Grant, error) { return w.Lock(ctx) })
	writerQueued(t, b, probe)
	reader := start(func() (rwlock.Grant, error) { return r3.RLock(ctx) })
	ok(t, r1.RUnlock(ctx), "RUnlock")
	notYet(t, writer, "writer while a reader still holds")
	ok(t, r2.Release(ctx, g2), "Release")
	gw := awaitOK(t, b, writer, "writer after the readers")
	if gw.Mode != rwlock.Write {
		t.Fatalf("Lock gave a %v grant", gw.Mode)
	}
	notYet(t, reader, "reader behind a writer")
	ok(t, w.Unlock(ctx), "Unlock")
	g3 := awaitOK(t, b, reader, "reader behind the writer")
	if g3.Mode != rwlock.Read {
		t.Fatalf("RLock gave a %v grant", g3.Mode)
	}
	increasing(t, "readers, writer, reader", g1.Token(), gw.Token(), g3.Token())
	ok(t, r3.RUnlock(ctx), "RUnlock")
	rwFree(t, b, probe, "after everyone released")
}

// rwSameOwner: a Service holds one grant at a time: its second RLock or
// Lock waits until the first grant is released, though other readers get
// in, and then is a fresh grant.
func rwSameOwner(t *testing.T, b Backend) {
	a, other := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	g1 := mustRLock(t, b, a)
	second := start(func() (rwlock.Grant, error) { return a.RLock(ctx) })
	gr, err := other.TryRLock(ctx)
	ok(t, err, "another owner's TryRLock beside a reader")
	ok(t, other.Release(ctx, gr), "Release")
	notYet(t, second, "second RLock of the reading Service")
	ok(t, a.Release(ctx, g1), "Release")
	g2 := awaitOK(t, b, second, "second RLock")
	if g2.Mode != rwlock.Read || g2.Created == g1.Created {
		t.Fatalf("second RLock is not a fresh read grant: %+v then %+v", g1, g2)
	}
	write := start(func() (rwlock.Grant, error) { return a.Lock(ctx) })
	notYet(t, write, "Lock of the reading Service")
	ok(t, a.RUnlock(ctx), "RUnlock")
	gw := awaitOK(t, b, write, "Lock after the Service's own read grant")
	if gw.Mode != rwlock.Write {
		t.Fatalf("Lock gave a %v grant", gw.Mode)
	}
	increasing(t, "read then write", g2.Token(), gw.Token())
	ok(t, a.Unlock(ctx), "Unlock")
}

// rwNoUpgrade: a Service that holds a read grant cannot upgrade it: its
// Lock, called by the goroutine that reads, waits until its context ends
// and returns the context's error; TryLock and TryRLock fail at once. The
// read grant is still held, alone (others may still read, a writer is
// still kept out), and the failed calls leave nothing behind.
func rwNoUpgrade(t *testing.T, b Backend) {
	a, other := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	events := a.Subscribe(ctx)
	g := mustRLock(t, b, a)
	wantAcquired(t, b, events, rwHold(g))
	wctx, cancel := context.WithTimeout(ctx, brief)
	defer cancel()
	errIs(t, takeErr(a.Lock(wctx)), context.DeadlineExceeded, "Lock of the Service that reads")
	errIs(t, takeErr(a.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock of the Service that reads")
	errIs(t, takeErr(a.TryRLock(ctx)), rwlock.ErrRWLockTaken, "TryRLock of the Service that reads")
	wantAlive(t, a, "after its upgrade failed")
	errIs(t, takeErr(other.TryLock(ctx)), rwlock.ErrRWLockTaken, "another owner's TryLock beside the reader")
	gr, err := other.TryRLock(ctx)
	ok(t, err, "another owner's TryRLock beside the reader")
	if gr.Token() != g.Token() {
		t.Fatalf("reader beside the one whose upgrade failed got token %d, want %d", gr.Token(), g.Token())
	}
	ok(t, other.Release(ctx, gr), "Release")
	ok(t, a.RUnlock(ctx), "RUnlock of the read grant after the failed upgrade")
	wantReleased(t, b, events, rwHold(g))
	rwFree(t, b, other, "after the reader released")
}

// rwWritersInOrder: a writer that was queued before another writer asked
// acquires first, and the tokens follow that order.
func rwWritersInOrder(t *testing.T, b Backend) {
	r, w1, w2, probe := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	gr := mustRLock(t, b, r)
	first := start(func() (rwlock.Grant, error) { return w1.Lock(ctx) })
	writerQueued(t, b, probe)
	second := start(func() (rwlock.Grant, error) { return w2.Lock(ctx) })
	ok(t, r.RUnlock(ctx), "RUnlock")
	g1 := awaitOK(t, b, first, "the writer that queued first")
	notYet(t, second, "the writer that asked second, while the first holds")
	ok(t, w1.Unlock(ctx), "Unlock")
	g2 := awaitOK(t, b, second, "the writer that asked second")
	increasing(t, "reader, first writer, second writer", gr.Token(), g1.Token(), g2.Token())
	ok(t, w2.Unlock(ctx), "Unlock")
}

// rwBook checks, as grants come and go inside their critical sections, that
// a writer is alone, readers inside together share a token, a reader's token
// is above every earlier writer's and a writer's above every earlier token.
type rwBook struct {
	mu            sync.Mutex
	readers       int
	writer        bool
	epoch         fencing.Token // the token of the readers inside
	lastWriter    fencing.Token
	highest       fencing.Token
	reads, writes int
}

func (k *rwBook) enter(g rwlock.Grant) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	tok := g.Token()
	switch {
	case k.writer:
		return fmt.Errorf("%v grant %d inside with a writer", g.Mode, tok)
	case g.Mode == rwlock.Write && k.readers > 0:
		return fmt.Errorf("writer %d inside with %d readers", tok, k.readers)
	case g.Mode == rwlock.Write && tok <= k.highest:
		return fmt.Errorf("writer's token %d not above every earlier token (%d)", tok, k.highest)
	case g.Mode == rwlock.Read && tok <= k.lastWriter:
		return fmt.Errorf("reader's token %d not above the earlier writer's %d", tok, k.lastWriter)
	case g.Mode == rwlock.Read && k.readers > 0 && tok != k.epoch:
		return fmt.Errorf("readers inside together hold tokens %d and %d", k.epoch, tok)
	}
	if g.Mode == rwlock.Write {
		k.writer, k.lastWriter = true, tok
		k.writes++
	} else {
		k.readers++
		k.epoch = tok
		k.reads++
	}
	k.highest = max(k.highest, tok)
	return nil
}

func (k *rwBook) leave(g rwlock.Grant) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if g.Mode == rwlock.Write {
		k.writer = false
	} else {
		k.readers--
	}
}

// rwExclusion: readers and writers contending in rounds through DoRead and
// DoWrite keep exclusion and every token law.
func rwExclusion(t *testing.T, b Backend) {
	const owners, rounds = 6, 4
	var book rwBook
	var wg sync.WaitGroup
	errs := make(chan error, 2*owners*rounds)
	fn := func(_ context.Context, g rwlock.Grant) error {
		if err := book.enter(g); err != nil {
			return err
		}
		book.leave(g)
		return nil
	}
	for i := range owners {
		l := b.NewRWLock(t, name(t))
		do := rwlock.DoRead
		if i%3 == 0 {
			do = rwlock.DoWrite
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if err := do(b.ctx(t), l, fn); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if book.reads+book.writes != owners*rounds {
		t.Fatalf("%d reads and %d writes, want %d in all", book.reads, book.writes, owners*rounds)
	}
	rwFree(t, b, b.NewRWLock(t, name(t)), "after every owner released")
}

// rwEpochs: readers that hold together share a token above the writer
// before them, even one that joins late; the next writer is above them all;
// one guard admits the tokens in order and rejects the zombies.
func rwEpochs(t *testing.T, b Backend) {
	w1, w2 := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ra, rb, rc, probe := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	gw1 := mustWLock(t, b, w1)
	cha := start(func() (rwlock.Grant, error) { return ra.RLock(ctx) })
	chb := start(func() (rwlock.Grant, error) { return rb.RLock(ctx) })
	ok(t, w1.Unlock(ctx), "Unlock")
	ga, gb := awaitOK(t, b, cha, "reader a"), awaitOK(t, b, chb, "reader b")
	if ga.Token() != gb.Token() {
		t.Fatalf("readers holding together got %d and %d, want one token", ga.Token(), gb.Token())
	}
	increasing(t, "writer then readers", gw1.Token(), ga.Token())
	ok(t, ra.RUnlock(ctx), "RUnlock")
	gc := mustRLock(t, b, rc)
	if gc.Token() != gb.Token() {
		t.Fatalf("late reader beside a holding reader got %d, want the readers' %d", gc.Token(), gb.Token())
	}
	writer := start(func() (rwlock.Grant, error) { return w2.Lock(ctx) })
	writerQueued(t, b, probe)
	ok(t, rb.RUnlock(ctx), "RUnlock")
	ok(t, rc.Release(ctx, gc), "Release")
	gw2 := awaitOK(t, b, writer, "second writer")
	increasing(t, "readers then writer", gc.Token(), gw2.Token())

	gd := guard.New()
	for _, tok := range []fencing.Token{gw1.Token(), ga.Token(), gb.Token(), gc.Token(), gw2.Token()} {
		ok(t, gd.Check(tok), fmt.Sprintf("guard given token %d in order", tok))
	}
	errIs(t, gd.Check(gw1.Token()), fencing.ErrTokenStale, "guard given the first writer's token")
	errIs(t, gd.Check(ga.Token()), fencing.ErrTokenStale, "guard given a reader's token after the second writer")
	ok(t, w2.Unlock(ctx), "Unlock")
	rwFree(t, b, probe, "after everyone released")
}

// rwTry: TryRLock and TryLock take what is free and fail at once with
// ErrRWLockTaken otherwise; RUnlock, Unlock and Release fail with ErrNotHeld
// for grants this Service does not hold, of either mode.
func rwTry(t *testing.T, b Backend) {
	a, c := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	errIs(t, a.RUnlock(ctx), rwlock.ErrNotHeld, "RUnlock with nothing held")
	errIs(t, a.Unlock(ctx), rwlock.ErrNotHeld, "Unlock with nothing held")
	errIs(t, a.Release(ctx, rwlock.Grant{}), rwlock.ErrNotHeld, "Release of a zero grant")
	gr, err := a.TryRLock(ctx)
	ok(t, err, "TryRLock of a free lock")
	if gr.Mode != rwlock.Read {
		t.Fatalf("TryRLock gave a %v grant", gr.Mode)
	}
	errIs(t, a.Unlock(ctx), rwlock.ErrNotHeld, "Unlock while holding a read grant")
	errIs(t, takeErr(c.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock with a reader holding")
	gc, err := c.TryRLock(ctx)
	ok(t, err, "TryRLock beside a reader")
	ok(t, c.RUnlock(ctx), "RUnlock")
	ok(t, a.Release(ctx, gr), "Release")
	errIs(t, a.Release(ctx, gr), rwlock.ErrNotHeld, "retried Release")
	errIs(t, a.Release(ctx, gc), rwlock.ErrNotHeld, "Release of another owner's grant")
	gw, err := c.TryLock(ctx)
	ok(t, err, "TryLock of a free lock")
	if gw.Mode != rwlock.Write {
		t.Fatalf("TryLock gave a %v grant", gw.Mode)
	}
	errIs(t, c.RUnlock(ctx), rwlock.ErrNotHeld, "RUnlock while holding a write grant")
	errIs(t, takeErr(a.TryRLock(ctx)), rwlock.ErrRWLockTaken, "TryRLock with a writer holding")
	errIs(t, takeErr(a.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock with a writer holding")
	errIs(t, takeErr(c.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock by the writer itself")
	errIs(t, a.Release(ctx, gr), rwlock.ErrNotHeld, "Release of an ended read grant while another owner writes")
	ok(t, c.Release(ctx, gw), "Release")
	rwFree(t, b, a, "after everyone released")
}

// rwReleaseCreated: Release names the grant by Created alone. A reader that
// reads again within one read epoch holds the same token again (and a
// backend may reuse its key names), yet a retried Release of any earlier
// grant must not free the current one; a zero Created never matches; the
// held grant's Created alone (its Mode too left zero) releases it, read or
// write.
func rwReleaseCreated(t *testing.T, b Backend) {
	a, keeper := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	mustRLock(t, b, keeper) // keeps the read epoch open
	var ended []rwlock.Grant
	for range 2 {
		g := mustRLock(t, b, a)
		ok(t, a.Release(ctx, g), "Release")
		ended = append(ended, g)
	}
	cur := mustRLock(t, b, a)
	for _, g := range ended {
		if g.Created == cur.Created {
			t.Fatalf("two grants share Created %d", g.Created)
		}
		errIs(t, a.Release(ctx, g), rwlock.ErrNotHeld, "Release of an ended read grant of the same epoch")
	}
	zero := cur
	zero.Created = 0
	errIs(t, a.Release(ctx, zero), rwlock.ErrNotHeld, "Release of the held grant with a zero Created")
	ok(t, a.Release(ctx, rwlock.Grant{Created: cur.Created}), "Release of the held read grant named by its Created alone")
	ok(t, keeper.RUnlock(ctx), "RUnlock")
	w := mustWLock(t, b, a)
	ok(t, a.Release(ctx, rwlock.Grant{Created: w.Created}), "Release of the held write grant named by its Created alone")
	mustWLock(t, b, keeper)
	ok(t, keeper.Unlock(ctx), "Unlock")
}

// rwCancelled: an RLock or Lock whose context ends while it waits returns
// ctx.Err() and leaves nothing behind; a withdrawn writer no longer holds
// back readers.
func rwCancelled(t *testing.T, b Backend) {
	w, r, probe := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	mustWLock(t, b, w)
	rctx, cancelR := context.WithTimeout(ctx, brief)
	defer cancelR()
	isCtxErr(t, takeErr(r.RLock(rctx)), context.DeadlineExceeded, "RLock whose deadline passes while a writer holds")
	wantAlive(t, r, "after its RLock's deadline passed")
	ok(t, w.Unlock(ctx), "Unlock")
	rwFree(t, b, probe, "after the reader gave up and the writer unlocked")

	// A queued writer, cancelled, stops refusing readers at once.
	mustRLock(t, b, r)
	wctx, cancelW := context.WithCancel(ctx)
	writer := start(func() (rwlock.Grant, error) { return w.Lock(wctx) })
	writerQueued(t, b, probe)
	cancelW()
	_, err := await(t, b, writer, "Lock cancelled while it waits")
	isCtxErr(t, err, context.Canceled, "Lock cancelled while it waits")
	g, err := probe.TryRLock(ctx)
	ok(t, err, "TryRLock right after the waiting writer withdrew")
	ok(t, probe.Release(ctx, g), "Release")
	ok(t, r.RUnlock(ctx), "RUnlock")
	rwFree(t, b, w, "by the writer that withdrew")
}

// rwEvents: a subscription gets Acquired and Released for every read and
// write grant, in order; one that is not read meanwhile misses nothing.
func rwEvents(t *testing.T, b Backend) {
	l := b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	events, lazy := l.Subscribe(ctx), l.Subscribe(ctx)
	var grants []rwlock.Grant
	for i := range 10 {
		var g rwlock.Grant
		if i%2 == 0 {
			g = mustRLock(t, b, l)
			wantAcquired(t, b, events, rwHold(g))
			ok(t, l.RUnlock(ctx), "RUnlock")
		} else {
			g = mustWLock(t, b, l)
			wantAcquired(t, b, events, rwHold(g))
			ok(t, l.Release(ctx, g), "Release")
		}
		wantReleased(t, b, events, rwHold(g))
		grants = append(grants, g)
	}
	for _, g := range grants {
		wantAcquired(t, b, lazy, rwHold(g))
		wantReleased(t, b, lazy, rwHold(g))
	}
}

// rwClose: Close of a reader releases at once (Released, then its
// subscriptions close), so a waiting writer does not wait for a TTL; the
// closed Service is done with ErrClosed.
func rwClose(t *testing.T, b Backend) {
	r, w := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	events := r.Subscribe(ctx)
	gr := mustRLock(t, b, r)
	writer := start(func() (rwlock.Grant, error) { return w.Lock(ctx) })
	gw := closeHolder(t, b, r, events, rwHold(gr), writer)
	increasing(t, "closed reader then writer", gr.Token(), gw.Token())
	errIs(t, takeErr(r.RLock(ctx)), primitives.ErrClosed, "RLock after Close")
	errIs(t, takeErr(r.TryLock(ctx)), primitives.ErrClosed, "TryLock after Close")
	errIs(t, r.RUnlock(ctx), primitives.ErrClosed, "RUnlock after Close")
	errIs(t, r.Close(), primitives.ErrClosed, "second Close")
	ok(t, w.Close(), "Close of the writer")
	rwFree(t, b, b.NewRWLock(t, name(t)), "right after the writer's Close returned")
}

// rwKillWriter: a writer whose session dies loses with Lost, DoWrite's
// context is cancelled with ErrLost, the Service is done and later calls
// fail wrapping ErrLost; the waiting reader follows with a higher token and
// a guard rejects the old writer.
func rwKillWriter(t *testing.T, b Backend) {
	w, r := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	do := startHeld(t, b, w, func(fn func(context.Context, rwlock.Grant) error) error { return rwlock.DoWrite(ctx, w, fn) })
	gw := do.grant
	reader := start(func() (rwlock.Grant, error) { return r.RLock(ctx) })
	b.KillSession(t, w)
	wantAcquiredLost(t, b, do.events, rwHold(gw))
	do.wantLost(t, b)
	wantEnded(t, b, w, primitives.ErrLost)
	errIs(t, takeErr(w.RLock(ctx)), primitives.ErrLost, "RLock after loss")
	errIs(t, takeErr(w.Lock(ctx)), primitives.ErrLost, "Lock after loss")
	errIs(t, w.Unlock(ctx), primitives.ErrLost, "Unlock after loss")
	gr := awaitOK(t, b, reader, "reader after the writer's session died")
	fenced(t, do.gd, gw.Token(), gr.Token())
	ok(t, r.RUnlock(ctx), "RUnlock")
}

// rwKillReader: a reader whose session dies loses with Lost; the writer after
// the readers has a token above theirs, and a guard rejects the dead reader.
func rwKillReader(t *testing.T, b Backend) {
	r1, r2, w := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	gd := guard.New()
	events := r1.Subscribe(ctx)
	g1, g2 := mustRLock(t, b, r1), mustRLock(t, b, r2)
	ok(t, gd.Check(g1.Token()), "guard admits a reader")
	ok(t, gd.Check(g2.Token()), "guard admits a reader of the same token")
	writer := start(func() (rwlock.Grant, error) { return w.Lock(ctx) })
	b.KillSession(t, r1)
	wantAcquiredLost(t, b, events, rwHold(g1))
	wantEnded(t, b, r1, primitives.ErrLost)
	notYet(t, writer, "writer while a reader still holds")
	ok(t, r2.RUnlock(ctx), "RUnlock")
	gw := awaitOK(t, b, writer, "writer after the readers")
	fenced(t, gd, g1.Token(), gw.Token())
	ok(t, w.Unlock(ctx), "Unlock")
}

// rwKillWaiter: a waiting writer whose session dies stops waiting with
// ErrLost and stops refusing readers.
func rwKillWaiter(t *testing.T, b Backend) {
	r, w, probe := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	mustRLock(t, b, r)
	writer := start(func() (rwlock.Grant, error) { return w.Lock(ctx) })
	writerQueued(t, b, probe)
	b.KillSession(t, w)
	_, err := await(t, b, writer, "Lock of a writer whose session died")
	errIs(t, err, primitives.ErrLost, "Lock of a writer whose session died")
	wantEnded(t, b, w, primitives.ErrLost)
	g, err := probe.TryRLock(ctx)
	ok(t, err, "TryRLock after the waiting writer died")
	ok(t, probe.Release(ctx, g), "Release")
	ok(t, r.RUnlock(ctx), "RUnlock")
}

// rwDeleteKey: a grant whose key is deleted behind its back is lost, read or
// write, DoRead's and DoWrite's contexts end with ErrLost, and the Service
// stays usable; a writer after the lost writer has a higher token.
func rwDeleteKey(t *testing.T, b Backend) {
	l, o := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	for _, do := range []func(context.Context, rwlock.Service, func(context.Context, rwlock.Grant) error) error{rwlock.DoWrite, rwlock.DoRead} {
		held := startHeld(t, b, l, func(fn func(context.Context, rwlock.Grant) error) error { return do(ctx, l, fn) })
		lost := held.grant
		b.DeleteKey(t, lost.Key)
		held.wantLost(t, b)
		wantAcquiredLost(t, b, held.events, rwHold(lost))
		wantAlive(t, l, "after only its key was deleted")
		errIs(t, l.Release(ctx, lost), rwlock.ErrNotHeld, "Release of the lost grant")
		if lost.Mode == rwlock.Write {
			gw := mustWLock(t, b, o)
			fenced(t, held.gd, lost.Token(), gw.Token())
			ok(t, o.Unlock(ctx), "Unlock")
		}
	}
	rwFree(t, b, l, "by the Service whose keys were deleted")
}

// rwPause: a reader paused past its TTL is replaced by a writer with a
// higher token; a guard rejects the paused reader, which sees Lost once it
// resumes.
func rwPause(t *testing.T, b Backend) {
	r, w := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	gd := guard.New()
	events := r.Subscribe(ctx)
	gr := mustRLock(t, b, r)
	ok(t, gd.Check(gr.Token()), "guard admits the reader")
	writer := start(func() (rwlock.Grant, error) { return w.Lock(ctx) })
	resume := b.pause(t, r)
	gw := awaitOK(t, b, writer, "writer while the reader is paused")
	fenced(t, gd, gr.Token(), gw.Token())
	resume()
	wantAcquiredLost(t, b, events, rwHold(gr))
	wantEnded(t, b, r, primitives.ErrLost)
	errIs(t, r.RUnlock(ctx), primitives.ErrLost, "RUnlock after the paused session expired")
	ok(t, w.Unlock(ctx), "Unlock")
}

// rwEndedContext: RUnlock, Unlock and Release given a context that has
// already ended release nothing and return the context's error; the grant
// stands.
func rwEndedContext(t *testing.T, b Backend) {
	a, other := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	g := mustRLock(t, b, a)
	errIs(t, a.RUnlock(ended), context.Canceled, "RUnlock with an ended context")
	errIs(t, a.Release(ended, g), context.Canceled, "Release of a read grant with an ended context")
	errIs(t, takeErr(other.TryLock(ctx)), rwlock.ErrRWLockTaken, "TryLock after calls with an ended context (the read grant must stand)")
	ok(t, a.RUnlock(ctx), "RUnlock")
	g = mustWLock(t, b, a)
	errIs(t, a.Unlock(ended), context.Canceled, "Unlock with an ended context")
	errIs(t, a.Release(ended, g), context.Canceled, "Release of a write grant with an ended context")
	errIs(t, takeErr(other.TryRLock(ctx)), rwlock.ErrRWLockTaken, "TryRLock after calls with an ended context (the write grant must stand)")
	ok(t, a.Release(ctx, g), "Release")
}
