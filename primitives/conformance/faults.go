package conformance

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// LostLate bounds how late after a hold's Suspended.Deadline its Lost may
// be delivered: the loss is due at the deadline, and a successor may hold
// from then on.
const LostLate = 250 * time.Millisecond

// The laws below are the ones faults break: a store that loses one
// key, a session cut off from its store, a caller that gives up at any
// moment, input no store can hold.

// lockLostAtDeadline: a holder whose renewals stop is told Suspended with a
// deadline; it is told Lost no later than LostLate after that deadline,
// and a successor holds only after it.
func lockLostAtDeadline(t *testing.T, b Backend) {
	h, w := b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	events := h.Subscribe(ctx)
	gh := mustLock(t, b, h)
	wantAcquired(t, b, events, lockHold(gh))
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	resume := b.PauseRenewal(t, h)
	var once sync.Once
	t.Cleanup(func() { once.Do(resume) })
	e, _ := readUntil(t, b, events, "Suspended", func(e primitives.Event) bool {
		_, ok := e.(primitives.Suspended)
		return ok
	})
	deadline := e.(primitives.Suspended).Deadline
	wantLost(t, b, events, lockHold(gh))
	if late := time.Since(deadline); late > LostLate {
		t.Fatalf("Lost delivered %v after the Suspended deadline, want within %v", late, LostLate)
	}
	gw := awaitOK(t, b, waiter, "successor's Lock")
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("successor held %v before the previous holder's deadline", deadline.Sub(now))
	}
	if gw.Token() <= gh.Token() {
		t.Fatalf("successor's token %d not above %d", gw.Token(), gh.Token())
	}
	once.Do(resume)
	wantEnded(t, b, h, primitives.ErrLost)
	ok(t, w.Unlock(ctx), "Unlock")
}

// lockGrantWhileSuspended: a hold granted on a session that is suspended
// is followed by Suspended, as its sibling on the session was told; a Lock
// the suspended session cannot grant before its deadline fails with
// ErrLost.
func lockGrantWhileSuspended(t *testing.T, b Backend) {
	sibling := b.NewLock(t, name(t)+"-sibling")
	ctx := b.ctx(t)
	sibEvents := sibling.Subscribe(ctx)
	mustLock(t, b, sibling)
	w := b.NewLockSharing(t, name(t), sibling)
	h := b.NewLock(t, name(t))
	mustLock(t, b, h)
	events := w.Subscribe(ctx)
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	resume := b.PauseRenewal(t, sibling)
	var once sync.Once
	t.Cleanup(func() { once.Do(resume) })
	readUntil(t, b, sibEvents, "sibling's Suspended", func(e primitives.Event) bool {
		_, ok := e.(primitives.Suspended)
		return ok
	})
	ok(t, h.Unlock(ctx), "Unlock")
	gw, err := await(t, b, waiter, "Lock on the suspended session")
	if err != nil {
		// A backend whose waiters learn their turn over the link that
		// renews (ZooKeeper) grants nothing while cut off: the session
		// ends first, and the law has nothing more to check.
		errIs(t, err, primitives.ErrLost, "Lock on the suspended session")
		wantEnded(t, b, w, primitives.ErrLost)
		return
	}
	wantAcquired(t, b, events, lockHold(gw))
	e, _ := readUntil(t, b, events, "Suspended after the grant", func(e primitives.Event) bool {
		switch e.(type) {
		case primitives.Suspended, primitives.Released, primitives.Lost, primitives.Resumed:
			return true
		}
		return false
	})
	if s, isSuspended := e.(primitives.Suspended); !isSuspended || s.Created != gw.Created {
		t.Fatalf("after a grant on a suspended session: %#v, want Suspended for the grant (created %d)", e, gw.Created)
	}
	once.Do(resume)
}

// lockLayoutKeyDeleted: deleting any one key of the layout behind a
// holder's back keeps exclusion, or the holder is told Lost within half a
// TTL and the successor's token is higher; either way the lock goes on
// working.
func lockLayoutKeyDeleted(t *testing.T, b Backend) {
	ctx := b.ctx(t)
	probe := name(t) + "-probe"
	p := b.NewLock(t, probe)
	mustLock(t, b, p)
	n := len(b.LayoutKeys(t, probe))
	ok(t, p.Unlock(ctx), "Unlock")
	if n == 0 {
		t.Fatal("LayoutKeys lists no key while the lock is held")
	}
	for i := range n {
		nm := name(t) + "-" + string(rune('a'+i))
		h, o := b.NewLock(t, nm), b.NewLock(t, nm)
		events := h.Subscribe(ctx)
		gh := mustLock(t, b, h)
		wantAcquired(t, b, events, lockHold(gh))
		keys := b.LayoutKeys(t, nm)
		sort.Strings(keys)
		if len(keys) != n {
			t.Fatalf("layout of %s: %d keys %v, the probe had %d", nm, len(keys), keys, n)
		}
		key := keys[i]
		b.DeleteKey(t, key)
		deleted := time.Now()
		lostWithin := func() bool {
			timeout := time.After(time.Until(deleted.Add(b.prompt())))
			for {
				select {
				case e := <-events:
					if l, isLost := e.(primitives.Lost); isLost {
						if l.Created != gh.Created || !errors.Is(l.Err, primitives.ErrLost) {
							t.Fatalf("key %s deleted: %#v, want Lost for the hold", key, e)
						}
						return true
					}
				case <-timeout:
					return false
				}
			}
		}
		g, err := o.TryLock(ctx)
		switch {
		case err == nil:
			if !lostWithin() {
				t.Fatalf("key %s deleted: another owner holds while the holder was not told Lost within %v", key, b.prompt())
			}
			if g.Token() <= gh.Token() {
				t.Fatalf("key %s deleted: successor's token %d not above the holder's %d", key, g.Token(), gh.Token())
			}
			ok(t, o.Unlock(ctx), "Unlock of the successor")
		case errors.Is(err, lock.ErrLockTaken):
			if !lostWithin() {
				// The holder holds on: exclusion must, until it lets go.
				errIs(t, takeErr(o.TryLock(ctx)), lock.ErrLockTaken, "key "+key+" deleted, holder not told: TryLock")
				if err := h.Unlock(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
					t.Fatalf("key %s deleted: Unlock: %v", key, err)
				}
			}
			g := mustLock(t, b, o)
			if g.Token() <= gh.Token() {
				t.Fatalf("key %s deleted: successor's token %d not above the holder's %d", key, g.Token(), gh.Token())
			}
			ok(t, o.Unlock(ctx), "Unlock of the successor")
		default:
			t.Fatalf("key %s deleted: TryLock: %v", key, err)
		}
		lockFree(t, b, h, "after key "+key+" was deleted and the successor unlocked")
	}
}

// lockWaiterKeyDeleted: a waiter whose own key is deleted behind its back
// fails promptly with ErrLost, whoever holds, and blocks nobody.
func lockWaiterKeyDeleted(t *testing.T, b Backend) {
	h, w, c := b.NewLock(t, name(t)), b.NewLock(t, name(t)), b.NewLock(t, name(t))
	ctx := b.ctx(t)
	mustLock(t, b, h)
	waiter := start(func() (lock.Grant, error) { return w.Lock(ctx) })
	b.DeleteWaiter(t, w)
	deleted := time.Now()
	_, err := await(t, b, waiter, "Lock whose waiting key was deleted")
	errIs(t, err, primitives.ErrLost, "Lock whose waiting key was deleted")
	if d := time.Since(deleted); d > b.prompt() {
		t.Fatalf("waiter told %v after its key was deleted, want within %v", d, b.prompt())
	}
	ok(t, h.Unlock(ctx), "Unlock")
	lockFree(t, b, c, "after the holder unlocked and the waiter was lost")
	lockFree(t, b, w, "by the lost waiter")
}

// owner is one contender in cancelledAnyMoment: take and let go of
// whatever it contends for.
type owner struct {
	take  func(ctx context.Context) error
	letGo func(ctx context.Context) error
}

// cancelledAnyMoment: while one owner takes and lets go over and over,
// others give up after 0.5 to 20 ms, at every step of an acquisition; each
// failed take returns ctx.Err() itself (as lock.Service's Lock promises),
// nothing crashes, and nothing is left behind: a new owner takes at once.
func cancelledAnyMoment(t *testing.T, b Backend, newOwner func() owner) {
	const waiters, attempts = 4, 40
	ctx := b.ctx(t)
	holder := newOwner()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			if err := holder.take(ctx); err != nil {
				t.Errorf("holder's take: %v", err)
				return
			}
			if err := holder.letGo(ctx); err != nil {
				t.Errorf("holder's let go: %v", err)
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, waiters*attempts)
	for range waiters {
		o := newOwner()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range attempts {
				wctx, cancel := context.WithTimeout(ctx, 500*time.Microsecond+rand.N(20*time.Millisecond))
				err := o.take(wctx)
				cancel()
				switch {
				case err == nil:
					if err := o.letGo(ctx); err != nil {
						errs <- err
						return
					}
				case err != context.DeadlineExceeded: //nolint:errorlint // the promise is ctx.Err() itself
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
	close(errs)
	for err := range errs {
		t.Fatalf("a call whose context ended returned %q, want ctx.Err() itself (context.DeadlineExceeded)", err)
	}
	last := newOwner()
	tctx, cancel := context.WithTimeout(ctx, b.prompt())
	defer cancel()
	ok(t, last.take(tctx), "a new owner's take after every waiter gave up (within half a TTL)")
	ok(t, last.letGo(ctx), "let go")
}

func lockCancelledAnyMoment(t *testing.T, b Backend) {
	cancelledAnyMoment(t, b, func() owner {
		l := b.NewLock(t, name(t))
		return owner{
			take:  func(ctx context.Context) error { _, err := l.Lock(ctx); return err },
			letGo: l.Unlock,
		}
	})
}

func rwCancelledAnyMoment(t *testing.T, b Backend) {
	var n atomic.Int32
	cancelledAnyMoment(t, b, func() owner {
		l := b.NewRWLock(t, name(t))
		if n.Add(1)%2 == 0 {
			return owner{
				take:  func(ctx context.Context) error { _, err := l.RLock(ctx); return err },
				letGo: l.RUnlock,
			}
		}
		return owner{
			take:  func(ctx context.Context) error { _, err := l.Lock(ctx); return err },
			letGo: l.Unlock,
		}
	})
}

func electCancelledAnyMoment(t *testing.T, b Backend) {
	cancelledAnyMoment(t, b, func() owner {
		e := b.NewElection(t, name(t))
		return owner{
			take:  func(ctx context.Context) error { return e.Campaign(ctx, "v") },
			letGo: e.Resign,
		}
	})
}

// badNames: every name of the table is refused by every constructor with
// an error wrapping primitives.ErrInvalidArgument, and no service.
func badNames(t *testing.T, b Backend, kinds ...string) {
	names := append([]string{""}, b.BadNames...)
	for _, kind := range kinds {
		for _, nm := range names {
			c, err := b.Construct(t, kind, nm)
			if c != nil {
				c.Close()
			}
			if c != nil || !errors.Is(err, primitives.ErrInvalidArgument) {
				t.Errorf("new %s %q: %v (service %v), want an error wrapping ErrInvalidArgument", kind, nm, err, c != nil)
			}
		}
	}
}

// electOversizedValue: a value one byte over the backend's limit is
// refused by Campaign and Proclaim at once, with an error wrapping
// primitives.ErrInvalidArgument; nothing is written, the candidate stays
// usable, and a leader keeps its value.
func electOversizedValue(t *testing.T, b Backend) {
	e := b.NewElection(t, name(t))
	ctx := b.ctx(t)
	big := strings.Repeat("v", b.MaxValue+1)
	start := time.Now()
	errIs(t, e.Campaign(ctx, big), primitives.ErrInvalidArgument, "Campaign with an oversized value")
	if d := time.Since(start); d > b.prompt() {
		t.Fatalf("Campaign with an oversized value refused after %v, want at once", d)
	}
	wantAlive(t, e, "after an oversized Campaign")
	_, err := e.Leader(ctx)
	errIs(t, err, election.ErrNoLeader, "Leader after an oversized Campaign")
	ok(t, e.Campaign(ctx, "small"), "Campaign")
	errIs(t, e.Proclaim(ctx, big), primitives.ErrInvalidArgument, "Proclaim with an oversized value")
	l, err := e.Leader(ctx)
	ok(t, err, "Leader")
	if l.Value != "small" {
		t.Fatalf("leader's value %q after a refused Proclaim, want %q", l.Value, "small")
	}
	ok(t, e.Resign(ctx), "Resign")
}

// rwWaiterKeyDeleted: a writer waiting behind a reader, whose own key is
// deleted behind its back, fails with ErrLost within half a TTL and blocks
// nobody.
func rwWaiterKeyDeleted(t *testing.T, b Backend) {
	r, w, c := b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t)), b.NewRWLock(t, name(t))
	ctx := b.ctx(t)
	_, err := r.RLock(ctx)
	ok(t, err, "RLock")
	waiter := start(func() (rwlock.Grant, error) { return w.Lock(ctx) })
	b.DeleteWaiter(t, w)
	deleted := time.Now()
	_, err = await(t, b, waiter, "Lock whose waiting key was deleted")
	errIs(t, err, primitives.ErrLost, "Lock whose waiting key was deleted")
	if d := time.Since(deleted); d > b.prompt() {
		t.Fatalf("waiter told %v after its key was deleted, want within %v", d, b.prompt())
	}
	ok(t, r.RUnlock(ctx), "RUnlock")
	rwFree(t, b, c, "after the reader left and the waiting writer was lost")
}

// electWaiterKeyDeleted: a candidate waiting behind a leader, whose own
// key is deleted behind its back, fails with ErrLost within half a TTL and
// never leads.
func electWaiterKeyDeleted(t *testing.T, b Backend) {
	l, w, c := b.NewElection(t, name(t)), b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	mustCampaign(t, b, l, "leader")
	waiter := startErr(func() error { return w.Campaign(ctx, "waiter") })
	b.DeleteWaiter(t, w)
	deleted := time.Now()
	_, err := await(t, b, waiter, "Campaign whose waiting key was deleted")
	errIs(t, err, primitives.ErrLost, "Campaign whose waiting key was deleted")
	if d := time.Since(deleted); d > b.prompt() {
		t.Fatalf("candidate told %v after its key was deleted, want within %v", d, b.prompt())
	}
	ok(t, l.Resign(ctx), "Resign")
	got := mustCampaign(t, b, c, "next")
	if lead, err := c.Leader(ctx); err != nil || lead.Key != got.Key {
		t.Fatalf("Leader = %+v, %v after the lost candidate; want the next one, %s", lead, err, got.Key)
	}
	ok(t, c.Resign(ctx), "Resign")
}

// concurrentCloses: two Closes of svc, which holds (a deferred Close and a
// shutdown's, say), at once: one returns nil, the other an error wrapping
// ErrClosed, and each only once the hold is released in the backend:
// right after either returns, free(i) (i: 0, then 1) of another owner
// succeeds. svc's session is paused while the two start, for brief, so
// that neither can finish meanwhile; one that returns then must have
// released all the same.
func concurrentCloses(t *testing.T, b Backend, svc io.Closer, free func(i int) error) {
	ctx := b.ctx(t)
	var nils, frees int
	returned := func(err error) {
		t.Helper()
		switch {
		case err == nil:
			nils++
		case !errors.Is(err, primitives.ErrClosed):
			t.Fatalf("one of two Closes: %v, want nil or ErrClosed", err)
		}
		ok(t, free(frees), "right after one of two concurrent Closes of the holder returned")
		frees++
	}
	resume := sync.OnceFunc(b.Pause(t, svc))
	defer resume() // also when t fails meanwhile
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- svc.Close() }()
	}
	select {
	case err := <-errs:
		returned(err)
	case <-time.After(brief):
	}
	resume()
	for frees < 2 {
		select {
		case err := <-errs:
			returned(err)
		case <-ctx.Done():
			t.Fatalf("Close did not return: %v", ctx.Err())
		}
	}
	if nils != 1 {
		t.Fatalf("%d of two concurrent Closes returned nil, want 1", nils)
	}
}
