package etcdio

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
)

// lockService is lock.Service on a session: every owner queues under
// prefix+"/" and waits for every key created before its own, the order of
// etcd's concurrency.Mutex. Its token is the revision at which its key was
// first seen with no earlier key left: a revision at which it alone holds.
type lockService struct{ *service }

var lockSpec = &spec{kind: "lock", errTaken: lock.ErrLockTaken, errNotHeld: lock.ErrNotHeld, ownQueues: []string{""},
	keyTag: LockKeyTag}

// LockKeyTag marks the keys of disco's locks: a lock's key is
// prefix/<lease>-lock-<n>.<m>, an election's prefix/<lease>-<n>.<m>. Both
// may carry a value (WithValue, Campaign), so a reader of the prefix (disco
// status) tells them apart by this tag. Keys of an older disco's locks,
// like concurrency.Mutex's, have no tag and an empty value; the order of a
// lock's queue is its keys' CreateRevision whatever their names, so old
// and new holders exclude each other.
const LockKeyTag = "lock-"

// checkLockValue refuses WithValue on any constructor but NewLock, and a
// value larger than the largest accepted.
func checkLockValue(kind string, o options) error {
	switch {
	case !o.valueSet:
		return nil
	case kind != lockSpec.kind:
		return fmt.Errorf("WithValue is for locks only (an election's value is Campaign's): %w", ErrInvalidArgument)
	case len(o.value) > o.maxValue:
		return fmt.Errorf("WithValue: value of %d bytes, more than the %d accepted (WithMaxValueSize): %w",
			len(o.value), o.maxValue, ErrInvalidArgument)
	}
	return nil
}

// NewLock returns a lock on prefix. Waiters queue under prefix+"/" in the
// order etcd's concurrency.Mutex uses, so the two exclude each other on the
// same prefix (for a prefix that ends in "/", both use prefix+"/" too).
// With WithValue its keys carry a value naming the owner.
// Without WithSession the lock runs its own session, closed by its Close.
func NewLock(cli *clientv3.Client, prefix string, opts ...Option) (lock.Service, error) {
	svc, err := newService(lockSpec, cli, prefix, opts)
	if err != nil {
		return nil, err
	}
	return lockService{svc}, nil
}

func (l lockService) queue() queue { return queue{keys: l.prefix, blockers: l.prefix, value: l.value} }

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
	return l.release(ctx, driver.CreatedAt(g.Created))
}
