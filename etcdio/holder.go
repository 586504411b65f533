package etcdio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// holder is the queue both locks are made of. An owner writes a fresh key
// under a queue prefix and holds once no blocking key (one under the
// blockers prefix, created before its own) is left. It holds at most one
// grant at a time (see holds).
//
// A waiter watches only the blocking key just ahead of it, so a handoff
// sends one watch event to one waiter however many wait, and learns its
// turn from one transaction that confirms its own key and finds nobody left
// ahead. The waiting runs on the caller's goroutine; the loop keeps a record
// of it. The session mirrors only this owner's own keys (its own prefix
// under each queue prefix), to notice a hold's key deleted by someone else.
type holder struct {
	base

	// tokenFor, if set, is called off the loop once the owner holds, and
	// returns the grant's token; otherwise the token is the revision at
	// which the owner's key was first seen to hold.
	tokenFor func(ctx context.Context, h hold) (int64, error)
	// errTaken is the primitive's sentinel for TryLock's failure.
	errTaken error

	// Owned by the loop.
	wait *wait
}

// queue names where an owner's key goes and what it waits for.
type queue struct {
	mode     int    // the primitive's mode (rwlock.Mode), carried into the hold
	keys     string // prefix of the owner's key
	blockers string // prefix of the keys that block it
}

// wait is a key that waits for its turn on its caller's goroutine.
type wait struct {
	key       string
	createRev int64
	abort     chan error // the loop's reason to stop waiting; buffered, sent once
}

// stop tells the waiting caller to give up, at most once. Loop only.
func (w *wait) stop(err error) {
	select {
	case w.abort <- err:
	default:
	}
}

// acquire makes this owner hold the lock in q. The key and the check for
// blockers are one transaction, so an uncontended acquisition is a single
// round trip (plus tokenFor's).
func (h *holder) acquire(ctx context.Context, q queue, try bool) (hold, error) {
	if err := h.enter(ctx, try, h.errTaken); err != nil {
		return hold{}, err
	}
	g, granted, err := h.enqueue(ctx, q, try)
	if err != nil && !granted {
		h.leave() // a granted hold's end frees it, on the loop
	}
	return g, err
}

// enqueue writes the key and waits for the hold. granted reports whether
// the loop made it a hold (even if its token then failed): from then on the
// loop frees sem when the hold ends.
func (h *holder) enqueue(ctx context.Context, q queue, try bool) (g hold, granted bool, err error) {
	key := h.nextKey(q.keys)
	put := clientv3.OpPut(key, "", clientv3.WithLease(h.s.lease))
	txn := h.s.cli.Txn(ctx)
	if try {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(q.blockers), "=", 0).WithPrefix()).Then(put)
	} else {
		// The blocker created last before this key, if any: the one to wait
		// for. The Get runs before the Put, so it never sees this key.
		txn = txn.Then(clientv3.OpGet(q.blockers, clientv3.WithLastCreate()...), put)
	}
	resp, err := txn.Commit()
	if err != nil {
		h.s.deleteKey(key) // the put may have happened
		return hold{}, false, h.callErr(ctx, fmt.Errorf("%s: %w", h.name, err))
	}
	if try && !resp.Succeeded {
		return hold{}, false, fmt.Errorf("%s: %w", h.name, h.errTaken)
	}
	w := &wait{key: key, createRev: resp.Header.Revision, abort: make(chan error, 1)}
	token := w.createRev // nobody ahead: at createRev the key exists and none before it does
	if !try {
		if ahead := resp.Responses[0].GetResponseRange().Kvs; len(ahead) > 0 {
			token, err = h.waitTurn(ctx, w, q.blockers, ahead[0])
		}
	}
	if err == nil {
		g, err = call(ctx, h.s, func(r actor.Reply[hold]) { h.granted(w, q.mode, token, r) })
	}
	if err != nil {
		h.s.post(func() {
			if h.wait == w {
				h.wait = nil
			}
		})
		h.s.deleteKey(key)
		return hold{}, false, h.callErr(ctx, err)
	}
	if !g.ready {
		if g, err = h.tokenize(ctx, g); err != nil {
			// Granted but without a token: end the hold on the loop first,
			// then delete its key.
			_, _ = call(context.WithoutCancel(ctx), h.s, func(r actor.Reply[struct{}]) {
				if h.hold != nil && h.hold.createRev == w.createRev {
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

// waitTurn waits, on the caller's goroutine, until no blocker created before
// w's key is left, and returns the revision at which that was confirmed
// together with w's key still existing: the grant's token. pred is the
// blocker just ahead.
func (h *holder) waitTurn(ctx context.Context, w *wait, blockers string, pred *mvccpb.KeyValue) (int64, error) {
	if !h.s.post(func() { h.waiting(w) }) {
		return 0, h.s.Err()
	}
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.createRev)
	ahead := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(w.createRev-1))
	// look returns the blocker now just ahead of w's key (nil: none), and
	// the revision at which it looked.
	look := func() (*mvccpb.KeyValue, int64, error) {
		resp, err := h.s.cli.Txn(ctx).If(mine).Then(clientv3.OpGet(blockers, ahead...)).Commit()
		if err != nil {
			return nil, 0, err
		}
		if !resp.Succeeded {
			return nil, 0, fmt.Errorf("waiting key %s deleted by another client: %w", w.key, primitives.ErrLost)
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0], resp.Header.Revision, nil
		}
		return nil, resp.Header.Revision, nil
	}
	for {
		// Watch pred from now, and only then look: a deletion is either
		// seen by the look or delivered by the watch, never missed. A watch
		// from now is in sync at once; one from a past revision would be
		// served by etcd's slower catch-up path.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := h.s.cli.Watch(wctx, string(pred.Key), clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
		deleted, err := h.awaitWatch(ctx, w, wch, true)
		if err == nil && !deleted {
			var next *mvccpb.KeyValue
			var rev int64
			if next, rev, err = look(); err == nil && next == nil {
				cancel()
				return rev, nil
			}
			if err == nil && string(next.Key) == string(pred.Key) && next.CreateRevision == pred.CreateRevision {
				deleted, err = h.awaitWatch(ctx, w, wch, false)
			} else if err == nil {
				pred = next // pred is gone; someone before it is still there
			}
		}
		cancel()
		if err != nil && !transient(ctx, err) {
			return 0, err
		}
		if err != nil || !deleted {
			continue
		}
		// pred is gone: the one look that usually ends the wait.
		next, rev, err := look()
		switch {
		case err != nil && !transient(ctx, err):
			return 0, err
		case err == nil && next == nil:
			return rev, nil
		case err == nil:
			pred = next
		}
	}
}

// transient reports whether a waiter should look again after err: an etcd
// request failed (a member restarting, an election in progress), not the
// wait itself. It pauses briefly first.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, primitives.ErrLost) || errors.Is(err, primitives.ErrClosed) {
		return false
	}
	sleepCtx(ctx, 50*time.Millisecond)
	return ctx.Err() == nil
}

// awaitWatch waits for wch to report it is in place (created) or that its
// key was deleted; deleted says which. A failed watch (say, its member lost
// the cluster's leader) returns neither, after a pause, so the caller looks
// again with a new one.
func (h *holder) awaitWatch(ctx context.Context, w *wait, wch clientv3.WatchChan, created bool) (deleted bool, err error) {
	for {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				if ctx.Err() != nil {
					return false, ctx.Err()
				}
				sleepCtx(ctx, 50*time.Millisecond)
				return false, nil
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return true, nil
				}
			}
			if created && wr.Created {
				return false, nil
			}
		case err := <-w.abort:
			return false, err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

// waiting records a waiting key, so the session's end or Close can stop it.
// Loop only.
func (h *holder) waiting(w *wait) {
	switch {
	case h.ended:
		w.stop(h.Err())
	case h.gone(w.key, w.createRev):
		w.stop(fmt.Errorf("%s: waiting key %s deleted by another client: %w", h.name, w.key, primitives.ErrLost))
	default:
		h.wait = w
	}
}

// granted makes w's key the hold, with token (or, with tokenFor, a token to
// come), if the session and the key are still there. Loop only.
func (h *holder) granted(w *wait, mode int, token int64, r actor.Reply[hold]) {
	if h.wait == w {
		h.wait = nil
	}
	switch {
	case h.ended:
		r.Answer(hold{}, h.Err())
		return
	case h.gone(w.key, w.createRev):
		r.Answer(hold{}, fmt.Errorf("%s: key %s deleted before it was granted: %w", h.name, w.key, primitives.ErrLost))
		return
	}
	g := hold{key: w.key, createRev: w.createRev, token: token, mode: mode, ready: h.tokenFor == nil}
	if !r.Answer(g, nil) {
		return // the caller gave up and deletes its key
	}
	h.setHold(&g)
	if g.ready {
		h.events.Publish(primitives.Acquired{Key: g.key, Token: fencing.Token(g.token), Created: g.createRev})
	}
}

// tokenize gets the token of a hold that is not ready and publishes it.
func (h *holder) tokenize(ctx context.Context, g hold) (hold, error) {
	tok, err := h.tokenFor(ctx, g)
	if err != nil {
		return hold{}, h.callErr(ctx, fmt.Errorf("%s: fencing token: %w", h.name, err))
	}
	return call(context.WithoutCancel(ctx), h.s, func(r actor.Reply[hold]) {
		cur := h.hold
		if cur == nil || cur.createRev != g.createRev {
			r.Answer(hold{}, fmt.Errorf("%s: key %s lost before its token was issued: %w", h.name, g.key, primitives.ErrLost))
			return
		}
		cur.token, cur.ready = tok, true
		h.setHold(cur)
		if r.Answer(*cur, nil) {
			h.events.Publish(primitives.Acquired{Key: cur.key, Token: fencing.Token(tok), Created: cur.createRev})
		}
	})
}

// mirrorChanged ends a hold whose key vanished and stops a waiter whose key
// did. Loop only.
func (h *holder) mirrorChanged(*mirror) {
	h.checkHold()
	if w := h.wait; w != nil && h.gone(w.key, w.createRev) {
		h.wait = nil
		w.stop(fmt.Errorf("%s: waiting key %s deleted by another client: %w", h.name, w.key, primitives.ErrLost))
	}
}

// stopWait stops the waiter, if any, with err and returns its key. Loop only.
func (h *holder) stopWait(err error) []keyRev {
	w := h.wait
	if w == nil {
		return nil
	}
	h.wait = nil
	w.stop(err)
	return []keyRev{{w.key, w.createRev}}
}

// sessionEnded ends the hold and the wait with the session. Loop only.
func (h *holder) sessionEnded(err error) {
	h.endHoldFor(err)
	h.stopWait(err)
	h.finish(err)
}

func (h *holder) Close() error {
	return h.base.close(func() []keyRev {
		err := fmt.Errorf("%s: %w", h.name, primitives.ErrClosed)
		return append(h.endHoldFor(err), h.stopWait(err)...)
	})
}

// ttl is what grants report as their lease's time to live.
func (h *holder) ttl() time.Duration { return h.s.ttl }

// ownKeys returns what a holder mirrors: the deletions of its session's own
// keys under each of the queue prefixes prefix+sub.
func ownKeys(subs ...string) func(s *Session, prefix string) ([]string, bool) {
	return func(s *Session, prefix string) ([]string, bool) {
		var ps []string
		for _, sub := range subs {
			ps = append(ps, s.ownPrefix(prefix+sub))
		}
		return ps, false
	}
}
