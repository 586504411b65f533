package etcdio

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/lock"
)

// lockService is lock.Service on a session: every owner queues under
// prefix+"/" and waits for every key created before its own, the order of
// etcd's concurrency.Mutex. Its token is the revision at which its key was
// first seen with no earlier key left: a revision at which it alone holds.
type lockService struct{ holder }

// NewLock returns a lock on prefix. Waiters queue under prefix+"/" in the
// order etcd's concurrency.Mutex uses, so the two exclude each other on the
// same prefix. Without WithSession the lock runs its own session, closed by
// its Close.
func NewLock(cli *clientv3.Client, prefix string, opts ...Option) (lock.Service, error) {
	l := &lockService{}
	l.errTaken = lock.ErrLockTaken
	if err := l.start("lock", cli, prefix, opts, l, lock.ErrNotHeld, ownKeys("")); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *lockService) queue() queue { return queue{keys: l.prefix, blockers: l.prefix} }

func (l *lockService) grant(h hold) lock.Grant {
	return lock.Grant{FencingToken: fencing.Token(h.token), Key: h.key, LeaseID: int64(l.s.lease), TTL: l.ttl(), Created: h.createRev}
}

func (l *lockService) Lock(ctx context.Context) (lock.Grant, error) {
	h, err := l.acquire(ctx, l.queue(), false)
	return l.grant(h), err
}

func (l *lockService) TryLock(ctx context.Context) (lock.Grant, error) {
	h, err := l.acquire(ctx, l.queue(), true)
	return l.grant(h), err
}

func (l *lockService) Unlock(ctx context.Context) error { return l.release(ctx, nil) }

func (l *lockService) Release(ctx context.Context, g lock.Grant) error {
	return l.release(ctx, func(h hold) bool { return h.key == g.Key && h.token == int64(g.FencingToken) })
}
