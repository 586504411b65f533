package redisio

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// RWLock is redisio's rwlock.Service, what NewRWLock returns; it is
// exported for the reasons Lock is. It has no methods beyond
// rwlock.Service's and CancelOnSuspend.
type RWLock struct {
	face
	v *service
}

var _ rwlock.Service = (*RWLock)(nil)

// NewRWLock returns a read/write lock named name on cli. Readers and
// writers queue in one FIFO: a writer acquires at the head of the queue, a
// reader when no writer is ahead of it, so a waiting writer holds back the
// readers after it (no writer starvation). A writer's token is a new
// increment of the name's counter in the script that grants it, and it
// closes the read epoch; the first reader after it opens a new epoch with a
// new increment, which every reader granted until the next writer shares.
// So readers holding together share one token, above every writer before
// them, and one guard protects reads and writes. Options and bad input as
// NewLock.
func NewRWLock(cli *redis.Client, name string, opts ...Option) (rwlock.Service, error) {
	v, err := newService(cli, name, kindRWLock, opts)
	if err != nil {
		return nil, err
	}
	return &RWLock{v, v}, nil
}

func (l *RWLock) grant(h driver.Hold, err error) (rwlock.Grant, error) {
	if err != nil {
		return rwlock.Grant{}, err
	}
	return rwlock.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: l.v.s.ttl, Mode: h.Mode, Created: h.Created}, nil
}

// RLock blocks until this owner holds a read grant.
func (l *RWLock) RLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.v.acquire(ctx, false, "", rwlock.Read))
}

// TryRLock takes a read grant only if no writer holds or waits.
func (l *RWLock) TryRLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.v.acquire(ctx, true, "", rwlock.Read))
}

// RUnlock releases the current read grant; rwlock.ErrNotHeld if there is
// none.
func (l *RWLock) RUnlock(ctx context.Context) error {
	return l.v.release(ctx, driver.InMode(rwlock.Read))
}

// Lock blocks until this owner holds the write grant.
func (l *RWLock) Lock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.v.acquire(ctx, false, "", rwlock.Write))
}

// TryLock takes the write grant only if nobody holds or waits.
func (l *RWLock) TryLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.v.acquire(ctx, true, "", rwlock.Write))
}

// Unlock releases the current write grant; rwlock.ErrNotHeld if there is
// none.
func (l *RWLock) Unlock(ctx context.Context) error {
	return l.v.release(ctx, driver.InMode(rwlock.Write))
}

// Release releases exactly g (read or write), matched by its Created.
func (l *RWLock) Release(ctx context.Context, g rwlock.Grant) error {
	return l.v.release(ctx, driver.CreatedAt(g.Created))
}
