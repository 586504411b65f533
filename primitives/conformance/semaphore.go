package conformance

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// SemaphoreBackend is a Backend that offers semaphores. Its hooks
// (KillSession, Pause, DeleteKey) accept the services NewSemaphore makes.
type SemaphoreBackend struct {
	Backend
	// NewSemaphore makes a NEW owner of the semaphore name with n permits,
	// as Backend's factories do, and registers its Close with t.Cleanup. A
	// failure is returned as is (a disagreeing n: an error wrapping
	// semaphore.ErrPermitMismatch) and leaves nothing to clean.
	NewSemaphore func(t *testing.T, name string, n int) (semaphore.Service, error)
}

// TestSemaphore checks the promises of semaphore.Service and semaphore.Do
// against b, one parallel subtest per law:
//
//   - BoundSlotsAndTokens: never more than N hold; no slot is held twice at
//     once; each slot scope's guard admits every holder in turn.
//   - TryAcquire: ErrNoPermit at once while N hold, the holder included; a
//     released slot goes to the next owner with a higher token.
//   - ReleaseNotHeld: a retried Release, a grant of another Service and a
//     grant with Created zero are ErrNotHeld.
//   - PermitMismatch: an owner that disagrees on N gets ErrPermitMismatch;
//     the others go on.
//   - BadPermits: N below 1 or above MaxPermits is refused with
//     ErrInvalidArgument and records nothing (a later owner with another N
//     is not told of a mismatch); MaxPermits permits work.
//   - CancelledAcquireLeavesNothing: an Acquire past its deadline returns
//     ctx.Err() and blocks nobody.
//   - CancelledAtAnyMoment: Acquires of one permit whose contexts end at
//     any step return ctx.Err() itself, and leave nothing.
//   - Events: Acquired and Released for the grant; the Service, a
//     primitives.GrantScoper, names the grant's slot scope while it is
//     held and none once it is released.
//   - CloseReleasesPromptly: the waiting owner does not wait for a TTL.
//   - KillSession: Do's context cancelled with ErrLost; the waiter takes the
//     slot with a higher token, which the slot's guard then prefers.
//   - DeleteKey: Lost; the Service stays usable; the waiter takes the lost
//     holder's slot.
//   - GrantTokenNow: a primitives.GrantToken stamps the grant's slot scope
//     and token as soon as Acquire returns and none once Release returns.
//   - EndedContextKeepsHold: Release given a context that has ended fails
//     with its error and keeps the grant.
//   - NilContext: every call, semaphore.Do included, given a nil context
//     fails with ErrInvalidArgument (Subscribe: a channel closed at once),
//     writes nothing and keeps the grant.
func TestSemaphore(t *testing.T, b SemaphoreBackend) {
	t.Helper()
	b.check(t)
	if b.NewSemaphore == nil {
		t.Fatalf("conformance: backend %q lacks NewSemaphore", b.Name)
	}
	law(t, "BoundSlotsAndTokens", func(t *testing.T) { semBound(t, b) })
	law(t, "TryAcquire", func(t *testing.T) { semTry(t, b) })
	law(t, "ReleaseNotHeld", func(t *testing.T) { semNotHeld(t, b) })
	law(t, "PermitMismatch", func(t *testing.T) { semMismatch(t, b) })
	law(t, "BadPermits", func(t *testing.T) { semBadPermits(t, b) })
	law(t, "CancelledAcquireLeavesNothing", func(t *testing.T) { semCancelled(t, b) })
	law(t, "CancelledAtAnyMoment", func(t *testing.T) { semCancelledAnyMoment(t, b) })
	law(t, "Events", func(t *testing.T) { semEvents(t, b) })
	law(t, "CloseReleasesPromptly", func(t *testing.T) { semClose(t, b) })
	law(t, "KillSession", func(t *testing.T) { semKillSession(t, b) })
	law(t, "DeleteKey", func(t *testing.T) { semDeleteKey(t, b) })
	law(t, "GrantTokenNow", func(t *testing.T) { semGrantTokenNow(t, b) })
	law(t, "EndedContextKeepsHold", func(t *testing.T) { semEndedContext(t, b) })
	law(t, "NilContext", func(t *testing.T) { semNilContext(t, b) })
}

func semCancelledAnyMoment(t *testing.T, b SemaphoreBackend) {
	cancelledAnyMoment(t, b.Backend, func() owner {
		s := b.sem(t, 1)
		var held semaphore.Grant // an owner takes and lets go on one goroutine
		return owner{
			take: func(ctx context.Context) error {
				g, err := s.Acquire(ctx)
				if err == nil {
					held = g
				}
				return err
			},
			letGo: func(ctx context.Context) error { return s.Release(ctx, held) },
		}
	})
}

func (b SemaphoreBackend) sem(t *testing.T, n int) semaphore.Service {
	t.Helper()
	s, err := b.NewSemaphore(t, name(t), n)
	ok(t, err, "NewSemaphore")
	return s
}

func semHold(g semaphore.Grant) hold { return hold{g.Key, g.Token(), g.Created} }

// scopes is a resource's side of semaphore fencing: one guard per scope.
type scopes struct {
	mu     sync.Mutex
	guards map[string]*guard.Guard
}

func (s *scopes) check(scope string, tok fencing.Token) error {
	s.mu.Lock()
	if s.guards == nil {
		s.guards = map[string]*guard.Guard{}
	}
	g := s.guards[scope]
	if g == nil {
		g = guard.New()
		s.guards[scope] = g
	}
	s.mu.Unlock()
	return g.Check(tok)
}

func semBound(t *testing.T, b SemaphoreBackend) {
	const n, owners, rounds = 3, 10, 3
	var (
		mu      sync.Mutex
		holding int
		most    int
		inSlot  = map[int]bool{}
		gs      scopes
	)
	ctx := b.ctx(t)
	var wg sync.WaitGroup
	for range owners {
		s := b.sem(t, n)
		wg.Go(func() {
			for range rounds {
				err := semaphore.Do(ctx, s, func(ctx context.Context, g semaphore.Grant) error {
					if g.Slot < 0 || g.Slot >= n {
						t.Errorf("slot %d, want 0 to %d", g.Slot, n-1)
					}
					if err := gs.check(g.Scope(), g.Token()); err != nil {
						t.Errorf("guard of %s refused its holder: %v", g.Scope(), err)
					}
					mu.Lock()
					holding++
					most = max(most, holding)
					if inSlot[g.Slot] {
						t.Errorf("slot %d held twice at once", g.Slot)
					}
					inSlot[g.Slot] = true
					mu.Unlock()
					time.Sleep(time.Millisecond) // hold a moment: work, not synchronisation
					mu.Lock()
					holding--
					inSlot[g.Slot] = false
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most > n {
		t.Fatalf("%d held at once, %d permits", most, n)
	}
}

func semTry(t *testing.T, b SemaphoreBackend) {
	a, c, d := b.sem(t, 2), b.sem(t, 2), b.sem(t, 2)
	ctx := b.ctx(t)
	ga, err := a.TryAcquire(ctx)
	ok(t, err, "first TryAcquire")
	gc, err := c.TryAcquire(ctx)
	ok(t, err, "second TryAcquire")
	if ga.Slot == gc.Slot {
		t.Fatalf("two holders of slot %d", ga.Slot)
	}
	increasing(t, "holders' tokens", ga.Token(), gc.Token())
	_, err = d.TryAcquire(ctx)
	errIs(t, err, semaphore.ErrNoPermit, "TryAcquire with every permit held")
	_, err = a.TryAcquire(ctx)
	errIs(t, err, semaphore.ErrNoPermit, "TryAcquire of a holder")
	ok(t, a.Release(ctx, ga), "Release")
	gd, err := d.TryAcquire(ctx)
	ok(t, err, "TryAcquire after a Release")
	if gd.Slot != ga.Slot {
		t.Fatalf("slot %d after slot %d was released (slot %d held)", gd.Slot, ga.Slot, gc.Slot)
	}
	increasing(t, "tokens", ga.Token(), gc.Token(), gd.Token())
}

func semNotHeld(t *testing.T, b SemaphoreBackend) {
	a, c := b.sem(t, 2), b.sem(t, 2)
	ctx := b.ctx(t)
	ga, err := a.Acquire(ctx)
	ok(t, err, "Acquire")
	zero := ga
	zero.Created = 0
	errIs(t, a.Release(ctx, zero), semaphore.ErrNotHeld, "Release of a grant with Created zero")
	errIs(t, c.Release(ctx, ga), semaphore.ErrNotHeld, "Release of another Service's grant")
	ok(t, a.Release(ctx, semaphore.Grant{Created: ga.Created, Slot: ga.Slot}), "Release of the grant named by its Created and Slot alone")
	errIs(t, a.Release(ctx, ga), semaphore.ErrNotHeld, "retried Release")
	gb, err := a.Acquire(ctx)
	ok(t, err, "Acquire after Release")
	errIs(t, a.Release(ctx, ga), semaphore.ErrNotHeld, "Release of the earlier grant")
	wantAlive(t, a, "after a stale Release")
	ok(t, a.Release(ctx, gb), "Release of the current grant")
}

func semMismatch(t *testing.T, b SemaphoreBackend) {
	a := b.sem(t, 2)
	ctx := b.ctx(t)
	g, err := a.Acquire(ctx)
	ok(t, err, "Acquire")
	_, err = b.NewSemaphore(t, name(t), 3)
	errIs(t, err, semaphore.ErrPermitMismatch, "NewSemaphore with 3 permits after 2")
	wantAlive(t, a, "after a disagreeing owner was refused")
	ok(t, a.Release(ctx, g), "Release")
}

func semBadPermits(t *testing.T, b SemaphoreBackend) {
	for _, n := range []int{0, -1, semaphore.MaxPermits + 1, 1<<53 + 1, math.MaxInt} {
		s, err := b.NewSemaphore(t, name(t), n)
		if s != nil || !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewSemaphore with %d permits: %v (service %v), want an error wrapping ErrInvalidArgument", n, err, s != nil)
		}
	}
	ctx := b.ctx(t)
	a := b.sem(t, 2) // no bad N was recorded as the name's
	g, err := a.Acquire(ctx)
	ok(t, err, "Acquire after the refused owners")
	ok(t, a.Release(ctx, g), "Release")
	most, err := b.NewSemaphore(t, name(t)+"-most", semaphore.MaxPermits)
	ok(t, err, "NewSemaphore with MaxPermits")
	g, err = most.Acquire(ctx)
	ok(t, err, "Acquire of a semaphore with MaxPermits")
	ok(t, most.Release(ctx, g), "Release")
}

func semCancelled(t *testing.T, b SemaphoreBackend) {
	a, w, c := b.sem(t, 1), b.sem(t, 1), b.sem(t, 1)
	ctx := b.ctx(t)
	ga, err := a.Acquire(ctx)
	ok(t, err, "Acquire")
	bctx, cancel := context.WithTimeout(ctx, brief)
	defer cancel()
	_, err = w.Acquire(bctx)
	isCtxErr(t, err, context.DeadlineExceeded, "Acquire past its deadline")
	next := start(func() (semaphore.Grant, error) { return c.Acquire(ctx) })
	ok(t, a.Release(ctx, ga), "Release")
	released := time.Now()
	gc := awaitOK(t, b.Backend, next, "Acquire after the cancelled one")
	if d := time.Since(released); d > b.prompt() {
		t.Fatalf("the next owner's turn came %v after the Release, want within %v: the cancelled Acquire left something", d, b.prompt())
	}
	increasing(t, "tokens", ga.Token(), gc.Token())
}

func semEvents(t *testing.T, b SemaphoreBackend) {
	s := b.sem(t, 2)
	ctx := b.ctx(t)
	events := s.Subscribe(ctx)
	g, err := s.Acquire(ctx)
	ok(t, err, "Acquire")
	a := primitives.Acquired{Key: g.Key, Token: g.Token(), Created: g.Created}
	scoper, isScoper := s.(primitives.GrantScoper)
	if !isScoper {
		t.Fatalf("a semaphore Service of %s is no primitives.GrantScoper", b.Name)
	}
	if scope, held := scoper.GrantScope(a); !held || scope != g.Scope() {
		t.Errorf("GrantScope of the grant held: %q, %v; want %q", scope, held, g.Scope())
	}
	ok(t, s.Release(ctx, g), "Release")
	if scope, held := scoper.GrantScope(a); held {
		t.Errorf("GrantScope of the released grant: %q, true; want none (the grant is over)", scope)
	}
	wantAcquired(t, b.Backend, events, semHold(g))
	wantReleased(t, b.Backend, events, semHold(g))
}

func semClose(t *testing.T, b SemaphoreBackend) {
	a, c := b.sem(t, 1), b.sem(t, 1)
	ctx := b.ctx(t)
	events := a.Subscribe(ctx)
	ga, err := a.Acquire(ctx)
	ok(t, err, "Acquire")
	next := start(func() (semaphore.Grant, error) { return c.Acquire(ctx) })
	gc := closeHolder(t, b.Backend, a, events, semHold(ga), next)
	increasing(t, "tokens", ga.Token(), gc.Token())
}

func semKillSession(t *testing.T, b SemaphoreBackend) {
	a, c := b.sem(t, 1), b.sem(t, 1)
	ctx := b.ctx(t)
	r := startHeld(t, b.Backend, a, func(fn func(context.Context, semaphore.Grant) error) error {
		return semaphore.Do(ctx, a, fn)
	})
	next := start(func() (semaphore.Grant, error) { return c.Acquire(ctx) })
	b.KillSession(t, a)
	r.wantLost(t, b.Backend)
	wantEnded(t, b.Backend, a, primitives.ErrLost)
	gc := awaitOK(t, b.Backend, next, "Acquire after the holder's session died")
	if gc.Scope() != r.grant.Scope() {
		t.Fatalf("scope %s after %s, with one permit", gc.Scope(), r.grant.Scope())
	}
	ok(t, r.gd.Check(gc.Token()), "the slot's guard admits the successor")
	errIs(t, r.gd.Check(r.grant.Token()), fencing.ErrTokenStale, "the slot's guard, given the dead holder's token")
}

func semDeleteKey(t *testing.T, b SemaphoreBackend) {
	a, c, w := b.sem(t, 2), b.sem(t, 2), b.sem(t, 2)
	ctx := b.ctx(t)
	events := a.Subscribe(ctx)
	ga, err := a.Acquire(ctx)
	ok(t, err, "Acquire")
	gc, err := c.Acquire(ctx)
	ok(t, err, "Acquire")
	next := start(func() (semaphore.Grant, error) { return w.Acquire(ctx) })
	b.DeleteKey(t, ga.Key)
	wantAcquiredLost(t, b.Backend, events, semHold(ga))
	gw := awaitOK(t, b.Backend, next, "Acquire after a holder's key was deleted")
	if gw.Slot != ga.Slot || gw.Slot == gc.Slot {
		t.Fatalf("slot %d; the lost holder had %d, the other holds %d", gw.Slot, ga.Slot, gc.Slot)
	}
	increasing(t, "the slot's tokens", ga.Token(), gw.Token())
	wantAlive(t, a, "after only its key was deleted")
	errIs(t, a.Release(ctx, ga), semaphore.ErrNotHeld, "Release of the lost grant")
	ok(t, c.Release(ctx, gc), "Release of the other holder")
	g2, err := a.Acquire(ctx)
	ok(t, err, "Acquire after the loss")
	increasing(t, "tokens", gw.Token(), g2.Token())
}

// semGrantTokenNow: a GrantToken following a semaphore stamps the scope of
// the grant's slot with its token from Acquire's return until Release's.
func semGrantTokenNow(t *testing.T, b SemaphoreBackend) {
	s := b.sem(t, 2)
	ctx := b.ctx(t)
	src := primitives.FollowGrants(ctx, name(t), s)
	for i := range 10 {
		g, err := s.Acquire(ctx)
		ok(t, err, "Acquire")
		if scope, tok := src.Scoped(); scope != g.Scope() || tok != g.Token() {
			t.Fatalf("cycle %d: Scoped() = %q, %d right after Acquire returned %q, %d", i, scope, tok, g.Scope(), g.Token())
		}
		ok(t, s.Release(ctx, g), "Release")
		if _, tok := src.Scoped(); tok != 0 {
			t.Fatalf("cycle %d: token %d right after Release returned", i, tok)
		}
	}
}

// semEndedContext: Release given a context that has already ended releases
// nothing and returns the context's error; the grant stands.
func semEndedContext(t *testing.T, b SemaphoreBackend) {
	a, c := b.sem(t, 1), b.sem(t, 1)
	ctx := b.ctx(t)
	g, err := a.Acquire(ctx)
	ok(t, err, "Acquire")
	ended, cancel := context.WithCancel(ctx)
	cancel()
	errIs(t, a.Release(ended, g), context.Canceled, "Release with an ended context")
	_, err = c.TryAcquire(ctx)
	errIs(t, err, semaphore.ErrNoPermit, "TryAcquire after a Release with an ended context (the grant must stand)")
	ok(t, a.Release(ctx, g), "Release")
}
