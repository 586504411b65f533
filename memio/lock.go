package memio

import (
	"context"

	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// NewLock returns a lock on name in st: its waiters queue in the order they
// asked, and each grant's token is the store's revision at the grant. With
// WithValue its keys carry a value naming the owner (Store.Value).
func NewLock(st *Store, name string, opts ...Option) (lock.Service, error) {
	svc, o, err := newService(st, kindLock, name, opts)
	if err != nil {
		return nil, err
	}
	return lockService{svc, o.value}, nil
}

type lockService struct {
	*service
	value string // its keys' value (WithValue)
}

func (l lockService) grant(h driver.Hold, err error) (lock.Grant, error) {
	if err != nil {
		return lock.Grant{}, err
	}
	return lock.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: l.s.ttl, Created: h.Created}, nil
}

func (l lockService) Lock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Write, l.value, false))
}

func (l lockService) TryLock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Write, l.value, true))
}

func (l lockService) Unlock(ctx context.Context) error { return l.release(ctx, driver.Any) }

func (l lockService) Release(ctx context.Context, g lock.Grant) error {
	return l.release(ctx, driver.CreatedAt(g.Created))
}

// NewRWLock returns a read/write lock on name in st. Readers holding
// together share one token, the revision at which their read epoch began;
// a writer's token is the revision of its grant, so a single guard fences
// reads and writes.
func NewRWLock(st *Store, name string, opts ...Option) (rwlock.Service, error) {
	svc, _, err := newService(st, kindRWLock, name, opts)
	if err != nil {
		return nil, err
	}
	return rwlockService{svc}, nil
}

type rwlockService struct{ *service }

func (l rwlockService) grant(h driver.Hold, err error) (rwlock.Grant, error) {
	if err != nil {
		return rwlock.Grant{}, err
	}
	return rwlock.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: l.s.ttl, Mode: h.Mode, Created: h.Created}, nil
}

func (l rwlockService) RLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Read, "", false))
}

func (l rwlockService) TryRLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Read, "", true))
}

func (l rwlockService) Lock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Write, "", false))
}

func (l rwlockService) TryLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, rwlock.Write, "", true))
}

func (l rwlockService) RUnlock(ctx context.Context) error {
	return l.release(ctx, driver.InMode(rwlock.Read))
}

func (l rwlockService) Unlock(ctx context.Context) error {
	return l.release(ctx, driver.InMode(rwlock.Write))
}

func (l rwlockService) Release(ctx context.Context, g rwlock.Grant) error {
	return l.release(ctx, driver.CreatedAt(g.Created))
}
