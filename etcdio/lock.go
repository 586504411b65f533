package etcdio

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// lockService is lock.Service on a session. Its waiters queue by
// CreateRevision under prefix, as etcd's concurrency.Mutex does, and learn
// their turn from the session's mirror of the prefix.
type lockService struct {
	base
	sem chan struct{} // local queue: full while this Service holds or acquires

	// Owned by the loop.
	hold *lockHold
	wait *lockWait
}

type lockHold struct {
	key       string
	createRev int64
	token     int64
	releasing int // Releases in flight: the key's deletion is theirs, not a loss
}

type lockWait struct {
	key       string
	createRev int64
	reply     actor.Reply[lock.Grant]
}

// NewLock returns a lock on prefix. Waiters queue under prefix+"/" in the
// order etcd's concurrency.Mutex uses, so the two exclude each other on the
// same prefix. Without WithSession the lock runs its own session, closed by
// its Close.
func NewLock(cli *clientv3.Client, prefix string, opts ...Option) (lock.Service, error) {
	l := &lockService{sem: make(chan struct{}, 1)}
	if err := l.start("lock", cli, prefix, opts, l); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *lockService) Lock(ctx context.Context) (lock.Grant, error) { return l.acquire(ctx, false) }

func (l *lockService) TryLock(ctx context.Context) (lock.Grant, error) {
	return l.acquire(ctx, true)
}

func (l *lockService) acquire(ctx context.Context, try bool) (lock.Grant, error) {
	if err := l.usable(ctx); err != nil {
		return lock.Grant{}, err
	}
	if try {
		select {
		case l.sem <- struct{}{}:
		default:
			return lock.Grant{}, fmt.Errorf("lock %s: held by this service: %w", l.name, lock.ErrLockTaken)
		}
	} else {
		select {
		case l.sem <- struct{}{}:
		case <-ctx.Done():
			return lock.Grant{}, ctx.Err()
		case <-l.done:
			return lock.Grant{}, l.Err()
		}
	}
	g, err := l.enqueue(ctx, try)
	if err != nil {
		<-l.sem
	}
	return g, err
}

// enqueue writes this owner's key and waits for the loop to grant it. The
// key and the check for anyone ahead are one transaction, so an uncontended
// Lock is a single round trip.
func (l *lockService) enqueue(ctx context.Context, try bool) (lock.Grant, error) {
	key := l.s.newKey(l.prefix)
	put := clientv3.OpPut(key, "", clientv3.WithLease(l.s.lease))
	txn := l.s.cli.Txn(ctx)
	if try {
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(l.prefix), "=", 0).WithPrefix()).Then(put)
	} else {
		txn = txn.Then(clientv3.OpGet(l.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()), put)
	}
	resp, err := txn.Commit()
	if err != nil {
		l.s.deleteKey(key) // the put may have happened
		return lock.Grant{}, l.callErr(ctx, fmt.Errorf("lock %s: %w", l.name, err))
	}
	if try && !resp.Succeeded {
		return lock.Grant{}, fmt.Errorf("lock %s: %w", l.name, lock.ErrLockTaken)
	}
	rev := resp.Header.Revision
	ahead := !try && resp.Responses[0].GetResponseRange().Count > 0
	g, err := call(ctx, l.s, func(r actor.Reply[lock.Grant]) { l.queued(key, rev, ahead, r) })
	if err != nil {
		l.s.deleteKey(key)
		l.s.post(func() {
			if l.wait != nil && l.wait.key == key {
				l.wait = nil
			}
		})
		return lock.Grant{}, err
	}
	return g, nil
}

// queued registers a key just written at rev. Loop only.
func (l *lockService) queued(key string, rev int64, ahead bool, r actor.Reply[lock.Grant]) {
	switch {
	case l.ended:
		r.Answer(lock.Grant{}, l.Err())
	case l.m.ready && l.m.rev >= rev && !l.m.has(key):
		r.Answer(lock.Grant{}, fmt.Errorf("lock %s: key %s deleted before it was granted: %w", l.name, key, primitives.ErrLost))
	case !ahead:
		// The transaction saw nobody ahead: at rev the key exists and no
		// earlier one does.
		l.grant(key, rev, rev, r)
	default:
		l.wait = &lockWait{key: key, createRev: rev, reply: r}
		l.mirrorChanged(l.m)
	}
}

func (l *lockService) grant(key string, createRev, token int64, r actor.Reply[lock.Grant]) {
	g := lock.Grant{FencingToken: fencing.Token(token), Key: key, LeaseID: int64(l.s.lease), TTL: l.s.ttl}
	if !r.Answer(g, nil) {
		return // the caller gave up and deletes its key
	}
	l.hold = &lockHold{key: key, createRev: createRev, token: token}
	l.events.Publish(primitives.Acquired{Key: key, Token: g.FencingToken})
}

// mirrorChanged ends a hold whose key vanished and grants the waiter whose
// turn has come. Loop only.
func (l *lockService) mirrorChanged(m *mirror) {
	if !m.ready {
		return
	}
	if h := l.hold; h != nil && h.releasing == 0 && m.rev >= h.createRev && !m.has(h.key) {
		l.endHold(primitives.Lost{Key: h.key, Token: fencing.Token(h.token),
			Err: fmt.Errorf("lock %s: key %s deleted by another client: %w", l.name, h.key, primitives.ErrLost)})
		l.s.probeLease() // if the lease is gone, the session ends too
	}
	w := l.wait
	if w == nil || m.rev < w.createRev {
		return
	}
	if !m.has(w.key) {
		l.wait = nil
		w.reply.Answer(lock.Grant{}, fmt.Errorf("lock %s: waiting key %s deleted by another client: %w", l.name, w.key, primitives.ErrLost))
		return
	}
	if !m.anyBefore(l.prefix, w.createRev, false) {
		l.wait = nil
		l.grant(w.key, w.createRev, m.rev, w.reply)
	}
}

// endHold ends the current hold with ev (Released or Lost). Loop only.
func (l *lockService) endHold(ev primitives.Event) {
	l.hold = nil
	<-l.sem
	l.events.Publish(ev)
}

func (l *lockService) Unlock(ctx context.Context) error { return l.release(ctx, nil) }

func (l *lockService) Release(ctx context.Context, g lock.Grant) error { return l.release(ctx, &g) }

// release deletes the key of the current hold (or of g, if it is still
// held) only if it is still this hold's, so a late retry never deletes a
// newer hold.
func (l *lockService) release(ctx context.Context, g *lock.Grant) error {
	h, err := call(ctx, l.s, func(r actor.Reply[lockHold]) {
		h := l.hold
		switch {
		case l.ended:
			r.Answer(lockHold{}, l.Err())
		case h == nil || g != nil && (g.Key != h.key || int64(g.FencingToken) != h.token):
			r.Answer(lockHold{}, fmt.Errorf("lock %s: %w", l.name, lock.ErrNotHeld))
		case r.Answer(*h, nil):
			h.releasing++
		}
	})
	if err != nil {
		return l.callErr(ctx, err)
	}
	resp, terr := l.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.createRev)).
		Then(clientv3.OpDelete(h.key)).Commit()
	_, err = call(context.WithoutCancel(ctx), l.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, l.released(h, resp, terr))
	})
	return err
}

// released settles a Release's delete. Loop only.
func (l *lockService) released(h lockHold, resp *clientv3.TxnResponse, terr error) error {
	cur := l.hold
	if cur == nil || cur.key != h.key {
		// The hold ended meanwhile, only possible with the session.
		if l.ended {
			return l.Err()
		}
		return fmt.Errorf("lock %s: %w", l.name, lock.ErrNotHeld)
	}
	cur.releasing--
	gone := l.m.ready && l.m.rev >= cur.createRev && !l.m.has(cur.key)
	rel := primitives.Released{Key: cur.key, Token: fencing.Token(cur.token)}
	switch {
	case terr == nil && resp.Succeeded, terr != nil && gone:
		l.endHold(rel)
		return nil
	case terr != nil:
		return fmt.Errorf("lock %s: release %s: %w", l.name, cur.key, terr)
	default:
		l.endHold(primitives.Lost{Key: cur.key, Token: fencing.Token(cur.token),
			Err: fmt.Errorf("lock %s: key %s deleted by another client: %w", l.name, cur.key, primitives.ErrLost)})
		return fmt.Errorf("lock %s: key %s was already gone: %w", l.name, cur.key, lock.ErrNotHeld)
	}
}

// sessionEnded ends the hold and the wait with the session. Loop only.
func (l *lockService) sessionEnded(err error) {
	if h := l.hold; h != nil {
		l.endHold(endEvent(h.key, h.token, err))
	}
	if w := l.wait; w != nil {
		l.wait = nil
		w.reply.Answer(lock.Grant{}, err)
	}
	l.finish(err)
}

func (l *lockService) Close() error {
	return l.base.close(func() []keyRev {
		var keys []keyRev
		if h := l.hold; h != nil {
			keys = append(keys, keyRev{h.key, h.createRev})
			l.endHold(primitives.Released{Key: h.key, Token: fencing.Token(h.token)})
		}
		if w := l.wait; w != nil {
			l.wait = nil
			w.reply.Answer(lock.Grant{}, fmt.Errorf("lock %s: %w", l.name, primitives.ErrClosed))
			keys = append(keys, keyRev{w.key, w.createRev})
		}
		return keys
	})
}
