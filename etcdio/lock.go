package etcdio

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
)

// lockService is lock.Service on a session: every owner queues under
// prefix+"/" and waits for every key created before its own, the order of
// etcd's concurrency.Mutex. Its token is the revision at which its key was
// first seen with no earlier key left: a revision at which it alone holds.
type lockService struct{ *service }

var lockSpec = &spec{kind: "lock", errTaken: lock.ErrLockTaken, errNotHeld: lock.ErrNotHeld, ownQueues: []string{""}}

// NewLock returns a lock on prefix. Waiters queue under prefix+"/" in the
// order etcd's concurrency.Mutex uses, so the two exclude each other on the
// same prefix (for a prefix that ends in "/", both use prefix+"/" too).
// Without WithSession the lock runs its own session, closed by its Close.
func NewLock(cli *clientv3.Client, prefix string, opts ...Option) (lock.Service, error) {
	svc, err := newService(lockSpec, cli, prefix, opts)
	if err != nil {
		return nil, err
	}
	return lockService{svc}, nil
}

func (l lockService) queue() queue { return queue{keys: l.prefix, blockers: l.prefix} }

func (l lockService) grant(g driver.Hold, err error) (lock.Grant, error) {
	if err != nil {
		return lock.Grant{}, err
	}
	return lock.Grant{FencingToken: g.Token, Key: g.Key, LeaseID: g.LeaseID, TTL: l.s.ttl, Created: g.Created}, nil
}

func (l lockService) Lock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.acquire(ctx, l.queue(), false))
}

func (l lockService) TryLock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.acquire(ctx, l.queue(), true))
}

func (l lockService) Unlock(ctx context.Context) error { return l.release(ctx, nil) }

func (l lockService) Release(ctx context.Context, g lock.Grant) error {
	return l.release(ctx, driver.Exactly(g.Created, g.Key, g.FencingToken))
}
