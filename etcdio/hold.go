package etcdio

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// hold is one grant of a lock or one term of a leader: a key this service
// created, which it holds until it deletes it (release), someone else does,
// or the session ends. Until ready, its token is not known yet.
type hold struct {
	key       string
	createRev int64
	token     int64
	mode      int    // rwlock.Mode, for locks
	value     string // the leader's value, for elections
	ready     bool   // Acquired has been published
	releasing int    // releases in flight: the key's deletion is theirs
}

// holds is what every primitive keeps about its one hold at a time: the
// local semaphore its goroutines queue on, like a sync.Mutex, and the hold
// itself. It is part of base.
type holds struct {
	sem        chan struct{} // full while the service acquires or holds
	errNotHeld error         // the primitive's sentinel for "not held"

	heldMu sync.Mutex
	held   hold // a copy of the loop's hold, for reads off the loop (Term)

	// Owned by the loop.
	hold *hold
	// seen is the revision of this service's latest write: an election's
	// Observe waits for its mirror to reach it.
	seen int64
}

// enter takes the local semaphore: at once or not at all if try, else
// waiting until ctx ends or the service is done. A caller that entered and
// then fails before the loop made its key a hold calls leave; once the loop
// made it a hold, only the hold's end frees the semaphore.
func (b *base) enter(ctx context.Context, try bool, errTaken error) error {
	if err := b.usable(ctx); err != nil {
		return err
	}
	if try {
		select {
		case b.sem <- struct{}{}:
			return nil
		default:
			return fmt.Errorf("%s: held by this service: %w", b.name, errTaken)
		}
	}
	select {
	case b.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return b.Err()
	}
}

func (b *base) leave() { <-b.sem }

// setHold makes g the current hold (nil: none), on the loop and in the copy
// that Term reads. Loop only.
func (b *base) setHold(g *hold) {
	b.hold = g
	b.heldMu.Lock()
	if g != nil {
		b.held = *g
	} else {
		b.held = hold{}
	}
	b.heldMu.Unlock()
}

// current returns the copy of the current hold; ok is false if none.
func (b *base) current() (g hold, ok bool) {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	return b.held, b.held.key != ""
}

// endHold ends the current hold, frees the semaphore, and publishes ev if
// the hold's Acquired was published. Loop only.
func (b *base) endHold(ev primitives.Event) {
	ready := b.hold.ready
	b.setHold(nil)
	// A hold always owns the semaphore; never let a broken invariant block
	// the loop (and with it the keepalive).
	select {
	case <-b.sem:
	default:
		b.s.log.Error("hold ended without its semaphore", zap.String("primitive", b.name))
	}
	if ready && ev != nil {
		b.events.Publish(ev)
	}
}

// checkHold ends the hold with Lost if its key is gone, unless a release of
// it is in flight, and asks the session whether its lease is gone too.
// Loop only.
func (b *base) checkHold() {
	if g := b.hold; g != nil && g.releasing == 0 && b.gone(g.key, g.createRev) {
		b.endHold(b.lostEvent(g))
		b.s.probeLease()
	}
}

func (b *base) lostEvent(g *hold) primitives.Event {
	return primitives.Lost{Key: g.key, Token: fencing.Token(g.token), Created: g.createRev,
		Err: fmt.Errorf("%s: key %s deleted by another client: %w", b.name, g.key, primitives.ErrLost)}
}

// endHoldFor ends the hold, if any, because the session or the service ends
// with err (Released if closed, Lost otherwise), and returns its key for
// deletion. Loop only.
func (b *base) endHoldFor(err error) []keyRev {
	g := b.hold
	if g == nil {
		return nil
	}
	b.endHold(endEvent(g, err))
	return []keyRev{{g.key, g.createRev}}
}

// withHold runs f on the loop with the current hold, if it is ready and
// match (if set) accepts it, and returns a copy; otherwise errNotHeld.
func (b *base) withHold(ctx context.Context, match func(hold) bool, f func(*hold)) (hold, error) {
	g, err := call(ctx, b.s, func(r actor.Reply[hold]) {
		g := b.hold
		switch {
		case b.ended:
			r.Answer(hold{}, b.Err())
		case g == nil || !g.ready || match != nil && !match(*g):
			r.Answer(hold{}, fmt.Errorf("%s: %w", b.name, b.errNotHeld))
		case r.Answer(*g, nil):
			f(g)
		}
	})
	if err != nil {
		return hold{}, b.callErr(ctx, err)
	}
	return g, nil
}

// release deletes the key of the current hold (the one match accepts) only
// if it is still that hold's, so a late retry never deletes a newer hold. A
// failed request keeps the hold, so the release can be retried.
func (b *base) release(ctx context.Context, match func(hold) bool) error {
	g, err := b.withHold(ctx, match, func(g *hold) { g.releasing++ })
	if err != nil {
		return err
	}
	resp, terr := b.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.createRev)).
		Then(clientv3.OpDelete(g.key)).Commit()
	_, err = call(context.WithoutCancel(ctx), b.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, b.released(g, resp, terr))
	})
	return err
}

// released settles a release's delete. Loop only.
func (b *base) released(g hold, resp *clientv3.TxnResponse, terr error) error {
	cur := b.hold
	if cur == nil || cur.createRev != g.createRev {
		// The hold ended meanwhile, which only the session's end does.
		if b.ended {
			return b.Err()
		}
		return fmt.Errorf("%s: %w", b.name, b.errNotHeld)
	}
	cur.releasing--
	if terr == nil {
		b.seen = max(b.seen, resp.Header.Revision)
	}
	switch {
	case terr == nil && resp.Succeeded, terr != nil && b.gone(cur.key, cur.createRev):
		b.endHold(primitives.Released{Key: cur.key, Token: fencing.Token(cur.token), Created: cur.createRev})
		return nil
	case terr != nil:
		return fmt.Errorf("%s: release %s: %w", b.name, cur.key, terr)
	default:
		b.endHold(b.lostEvent(cur))
		return fmt.Errorf("%s: key %s was already gone: %w", b.name, cur.key, b.errNotHeld)
	}
}
