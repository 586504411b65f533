package etcdio

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// holder is the queue both locks are made of. An owner writes a fresh key
// under a queue prefix and holds once no blocking key (one under the
// blockers prefix, written before its own) is left; the session's mirror
// says when. It holds at most one grant at a time: its own goroutines queue
// locally on sem, like a sync.Mutex.
type holder struct {
	base
	sem chan struct{} // full while this owner holds or acquires

	// tokenFor, if set, is called off the loop once the owner holds, and
	// returns the grant's token; otherwise the token is the revision at
	// which the owner's key was first seen to hold.
	tokenFor func(ctx context.Context, h hold) (int64, error)
	// errTaken and errNotHeld are the primitive's own sentinel errors.
	errTaken, errNotHeld error

	// Owned by the loop.
	hold *hold
	wait *wait
}

// queue names where an owner's key goes and what it waits for.
type queue struct {
	mode     int    // the primitive's mode (rwlock.Mode), carried into the hold
	keys     string // prefix of the owner's key
	blockers string // prefix of the keys that block it
}

// hold is one grant. Until ready, its token is not known yet.
type hold struct {
	key       string
	createRev int64
	token     int64
	mode      int
	ready     bool // Acquired has been published
	releasing int  // Releases in flight: the key's deletion is theirs
}

type wait struct {
	hold
	blockers string
	reply    actor.Reply[hold]
}

func (h *holder) init(errTaken, errNotHeld error) {
	h.sem = make(chan struct{}, 1)
	h.errTaken, h.errNotHeld = errTaken, errNotHeld
}

// acquire makes this owner hold the lock in q. The key and the check for
// blockers are one transaction, so an uncontended acquisition is a single
// round trip (plus tokenFor's).
func (h *holder) acquire(ctx context.Context, q queue, try bool) (hold, error) {
	if err := h.usable(ctx); err != nil {
		return hold{}, err
	}
	if try {
		select {
		case h.sem <- struct{}{}:
		default:
			return hold{}, fmt.Errorf("%s: held by this service: %w", h.name, h.errTaken)
		}
	} else {
		select {
		case h.sem <- struct{}{}:
		case <-ctx.Done():
			return hold{}, ctx.Err()
		case <-h.done:
			return hold{}, h.Err()
		}
	}
	g, granted, err := h.enqueue(ctx, q, try)
	if err != nil && !granted {
		<-h.sem // a granted hold's end frees it, on the loop
	}
	return g, err
}

// enqueue writes the key and waits for the hold. granted reports whether
// the loop made it a hold (even if its token then failed): from then on the
// loop frees sem when the hold ends.
func (h *holder) enqueue(ctx context.Context, q queue, try bool) (g hold, granted bool, err error) {
	key := h.s.newKey(q.keys)
	put := clientv3.OpPut(key, "", clientv3.WithLease(h.s.lease))
	txn := h.s.cli.Txn(ctx)
	if try {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(q.blockers), "=", 0).WithPrefix()).Then(put)
	} else {
		txn = txn.Then(clientv3.OpGet(q.blockers, clientv3.WithPrefix(), clientv3.WithCountOnly()), put)
	}
	resp, err := txn.Commit()
	if err != nil {
		h.s.deleteKey(key) // the put may have happened
		return hold{}, false, h.callErr(ctx, fmt.Errorf("%s: %w", h.name, err))
	}
	if try && !resp.Succeeded {
		return hold{}, false, fmt.Errorf("%s: %w", h.name, h.errTaken)
	}
	rev := resp.Header.Revision
	ahead := !try && resp.Responses[0].GetResponseRange().Count > 0
	w := &wait{hold: hold{key: key, createRev: rev, mode: q.mode}, blockers: q.blockers}
	g, err = call(ctx, h.s, func(r actor.Reply[hold]) {
		w.reply = r
		h.queued(w, ahead)
	})
	if err != nil {
		// Never granted: the loop forgets the wait, the caller frees sem.
		h.s.post(func() {
			if h.wait != nil && h.wait.key == key {
				h.wait = nil
			}
		})
		h.s.deleteKey(key)
		return hold{}, false, err
	}
	if !g.ready {
		if g, err = h.tokenize(ctx, g); err != nil {
			// Granted but without a token: end the hold on the loop first,
			// then delete its key.
			_, _ = call(context.WithoutCancel(ctx), h.s, func(r actor.Reply[struct{}]) {
				if h.hold != nil && h.hold.key == key {
					h.endHold(nil)
				}
				r.Answer(struct{}{}, nil)
			})
			h.s.deleteKey(key)
			return hold{}, true, err
		}
	}
	return g, true, nil
}

// tokenize gets the token of a hold that is not ready and publishes it.
func (h *holder) tokenize(ctx context.Context, g hold) (hold, error) {
	tok, err := h.tokenFor(ctx, g)
	if err != nil {
		return hold{}, h.callErr(ctx, fmt.Errorf("%s: fencing token: %w", h.name, err))
	}
	return call(context.WithoutCancel(ctx), h.s, func(r actor.Reply[hold]) {
		cur := h.hold
		if cur == nil || cur.key != g.key {
			r.Answer(hold{}, fmt.Errorf("%s: key %s lost before its token was issued: %w", h.name, g.key, primitives.ErrLost))
			return
		}
		cur.token, cur.ready = tok, true
		if r.Answer(*cur, nil) {
			h.events.Publish(primitives.Acquired{Key: cur.key, Token: fencing.Token(tok)})
		}
	})
}

// queued registers a key just written. Loop only.
func (h *holder) queued(w *wait, ahead bool) {
	switch {
	case h.ended:
		w.reply.Answer(hold{}, h.Err())
	case h.m.ready && h.m.rev >= w.createRev && !h.m.has(w.key):
		w.reply.Answer(hold{}, fmt.Errorf("%s: key %s deleted before it was granted: %w", h.name, w.key, primitives.ErrLost))
	case !ahead:
		// The transaction saw no blocker: at createRev the key exists and
		// none before it does.
		h.grant(w, w.createRev)
	default:
		h.wait = w
		h.mirrorChanged(h.m)
	}
}

// grant makes w the hold, as of revision rev. Loop only.
func (h *holder) grant(w *wait, rev int64) {
	g := w.hold
	if h.tokenFor == nil {
		g.token, g.ready = rev, true
	}
	if !w.reply.Answer(g, nil) {
		return // the caller gave up and deletes its key
	}
	h.hold = &g
	if g.ready {
		h.events.Publish(primitives.Acquired{Key: g.key, Token: fencing.Token(g.token)})
	}
}

// mirrorChanged ends a hold whose key vanished and grants the waiter whose
// turn has come. Loop only.
func (h *holder) mirrorChanged(m *mirror) {
	if !m.ready {
		return
	}
	if g := h.hold; g != nil && g.releasing == 0 && m.rev >= g.createRev && !m.has(g.key) {
		h.endHold(h.lostEvent(g))
		h.s.probeLease() // if the lease is gone, the session ends too
	}
	w := h.wait
	if w == nil || m.rev < w.createRev {
		return
	}
	if !m.has(w.key) {
		h.wait = nil
		w.reply.Answer(hold{}, fmt.Errorf("%s: waiting key %s deleted by another client: %w", h.name, w.key, primitives.ErrLost))
		return
	}
	if !m.anyBefore(w.blockers, w.createRev) {
		h.wait = nil
		h.grant(w, m.rev)
	}
}

func (h *holder) lostEvent(g *hold) primitives.Event {
	return primitives.Lost{Key: g.key, Token: fencing.Token(g.token),
		Err: fmt.Errorf("%s: key %s deleted by another client: %w", h.name, g.key, primitives.ErrLost)}
}

// endHold ends the current hold, frees sem, and publishes ev if the hold's
// Acquired was published. Loop only.
func (h *holder) endHold(ev primitives.Event) {
	ready := h.hold.ready
	h.hold = nil
	<-h.sem
	if ready && ev != nil {
		h.events.Publish(ev)
	}
}

// release deletes the key of the current hold (or of the one named by key
// and token, if it is still held) only if it is still this hold's, so a late
// retry never deletes a newer hold. match, if set, must accept the hold.
func (h *holder) release(ctx context.Context, match func(hold) bool) error {
	g, err := call(ctx, h.s, func(r actor.Reply[hold]) {
		g := h.hold
		switch {
		case h.ended:
			r.Answer(hold{}, h.Err())
		case g == nil || !g.ready || match != nil && !match(*g):
			r.Answer(hold{}, fmt.Errorf("%s: %w", h.name, h.errNotHeld))
		case r.Answer(*g, nil):
			g.releasing++
		}
	})
	if err != nil {
		return h.callErr(ctx, err)
	}
	resp, terr := h.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.createRev)).
		Then(clientv3.OpDelete(g.key)).Commit()
	_, err = call(context.WithoutCancel(ctx), h.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, h.released(g, resp, terr))
	})
	return err
}

// released settles a release's delete. A failed request keeps the hold, so
// the release can be retried. Loop only.
func (h *holder) released(g hold, resp *clientv3.TxnResponse, terr error) error {
	cur := h.hold
	if cur == nil || cur.key != g.key {
		// The hold ended meanwhile, which only the session's end does.
		if h.ended {
			return h.Err()
		}
		return fmt.Errorf("%s: %w", h.name, h.errNotHeld)
	}
	cur.releasing--
	gone := h.m.ready && h.m.rev >= cur.createRev && !h.m.has(cur.key)
	switch {
	case terr == nil && resp.Succeeded, terr != nil && gone:
		h.endHold(primitives.Released{Key: cur.key, Token: fencing.Token(cur.token)})
		return nil
	case terr != nil:
		return fmt.Errorf("%s: release %s: %w", h.name, cur.key, terr)
	default:
		h.endHold(h.lostEvent(cur))
		return fmt.Errorf("%s: key %s was already gone: %w", h.name, cur.key, h.errNotHeld)
	}
}

// sessionEnded ends the hold and the wait with the session. Loop only.
func (h *holder) sessionEnded(err error) {
	if g := h.hold; g != nil {
		h.endHold(endEvent(g.key, g.token, err))
	}
	if w := h.wait; w != nil {
		h.wait = nil
		w.reply.Answer(hold{}, err)
	}
	h.finish(err)
}

func (h *holder) Close() error {
	return h.base.close(func() []keyRev {
		var keys []keyRev
		if g := h.hold; g != nil {
			keys = append(keys, keyRev{g.key, g.createRev})
			h.endHold(primitives.Released{Key: g.key, Token: fencing.Token(g.token)})
		}
		if w := h.wait; w != nil {
			h.wait = nil
			w.reply.Answer(hold{}, fmt.Errorf("%s: %w", h.name, primitives.ErrClosed))
			keys = append(keys, keyRev{w.key, w.createRev})
		}
		return keys
	})
}

// ttl is what grants report as their lease's time to live.
func (h *holder) ttl() time.Duration { return h.s.ttl }
