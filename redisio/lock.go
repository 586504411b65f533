package redisio

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives/lock"
)

// Lock is redisio's lock.Service; see NewLock.
type Lock struct{ *service }

var _ lock.Service = (*Lock)(nil)

// NewLock returns a lock named name on cli: FIFO among waiters, a fencing
// token from the name's counter incremented in the script that grants.
// Without WithSession it runs on a session of its own, closed by Close.
// Bad input (nil client, empty or "/" name, over 1 KiB, a name in disco's
// own key trees: disco/session, disco/sessions and the names below them,
// TTL below MinTTL) is an error wrapping primitives.ErrInvalidArgument, and
// nothing is written to Redis.
func NewLock(cli *redis.Client, name string, opts ...Option) (lock.Service, error) {
	v, err := newService(cli, "lock", name, kindLock, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{v}, nil
}

func (l *Lock) grant(h hold) lock.Grant {
	return lock.Grant{FencingToken: tokenOf(h), Key: h.key, LeaseID: l.s.id, TTL: l.s.ttl, Created: h.created}
}

// Lock blocks until this owner holds the lock.
func (l *Lock) Lock(ctx context.Context) (lock.Grant, error) {
	h, err := l.acquire(ctx, false, "", 'w')
	if err != nil {
		return lock.Grant{}, err
	}
	return l.grant(h), nil
}

// TryLock takes the lock only if nobody holds it or waits for it.
func (l *Lock) TryLock(ctx context.Context) (lock.Grant, error) {
	h, err := l.acquire(ctx, true, "", 'w')
	if err != nil {
		return lock.Grant{}, err
	}
	return l.grant(h), nil
}

// Unlock releases the current hold; lock.ErrNotHeld if there is none.
func (l *Lock) Unlock(ctx context.Context) error { return l.release(ctx, 0, true, 0) }

// Release releases exactly g, matched by its Created.
func (l *Lock) Release(ctx context.Context, g lock.Grant) error {
	return l.release(ctx, g.Created, false, 0)
}
