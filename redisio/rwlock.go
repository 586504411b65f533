package redisio

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives/rwlock"
)

// RWLock is redisio's rwlock.Service; see NewRWLock.
type RWLock struct{ *service }

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
	v, err := newService(cli, "rwlock", name, kindRWLock, opts)
	if err != nil {
		return nil, err
	}
	return &RWLock{v}, nil
}

func (l *RWLock) grant(h hold, err error) (rwlock.Grant, error) {
	if err != nil {
		return rwlock.Grant{}, err
	}
	mode := rwlock.Write
	if h.mode == 'r' {
		mode = rwlock.Read
	}
	return rwlock.Grant{FencingToken: tokenOf(h), Key: h.key, LeaseID: l.s.id, TTL: l.s.ttl, Mode: mode, Created: h.created}, nil
}

// RLock blocks until this owner holds a read grant.
func (l *RWLock) RLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, false, "", 'r'))
}

// TryRLock takes a read grant only if no writer holds or waits.
func (l *RWLock) TryRLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, true, "", 'r'))
}

// RUnlock releases the current read grant; rwlock.ErrNotHeld if there is
// none.
func (l *RWLock) RUnlock(ctx context.Context) error { return l.release(ctx, 0, true, 'r') }

// Lock blocks until this owner holds the write grant.
func (l *RWLock) Lock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, false, "", 'w'))
}

// TryLock takes the write grant only if nobody holds or waits.
func (l *RWLock) TryLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, true, "", 'w'))
}

// Unlock releases the current write grant; rwlock.ErrNotHeld if there is
// none.
func (l *RWLock) Unlock(ctx context.Context) error { return l.release(ctx, 0, true, 'w') }

// Release releases exactly g (read or write), matched by its Created.
func (l *RWLock) Release(ctx context.Context, g rwlock.Grant) error {
	return l.release(ctx, g.Created, false, 0)
}
