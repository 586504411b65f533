package redisio

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// Lock is redisio's lock.Service, what NewLock returns. NewLock's result is
// the interface so that a program depends on the contract, not on the
// backend; the type stays exported because it always was (code that
// type-asserts to *redisio.Lock keeps compiling) and so that its methods
// are documented here. It has no methods beyond lock.Service's and
// CancelOnSuspend.
type Lock struct {
	face
	v *service
}

var _ lock.Service = (*Lock)(nil)

// NewLock returns a lock named name on cli: FIFO among waiters, a fencing
// token from the name's counter incremented in the script that grants.
// Without WithSession it runs on a session of its own, closed by Close.
// Bad input (nil client, empty or "/" name, over 1 KiB, a name in disco's
// own key trees: disco/session, disco/sessions and the names below them,
// TTL below MinTTL, WithTTL or WithSuspendAfter with WithSession, a
// WithValue over the largest value) is an error wrapping
// primitives.ErrInvalidArgument, and nothing is written to Redis. With
// WithValue its holds carry a value naming the owner.
func NewLock(cli *redis.Client, name string, opts ...Option) (lock.Service, error) {
	v, err := newService(cli, name, kindLock, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{v, v}, nil
}

func (l *Lock) grant(h driver.Hold, err error) (lock.Grant, error) {
	if err != nil {
		return lock.Grant{}, err
	}
	return lock.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: l.v.s.ttl, Created: h.Created}, nil
}

// Lock blocks until this owner holds the lock.
func (l *Lock) Lock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.v.acquire(ctx, false, l.v.value, rwlock.Write))
}

// TryLock takes the lock only if nobody holds it or waits for it.
func (l *Lock) TryLock(ctx context.Context) (lock.Grant, error) {
	return l.grant(l.v.acquire(ctx, true, l.v.value, rwlock.Write))
}

// Unlock releases the current hold; lock.ErrNotHeld if there is none.
func (l *Lock) Unlock(ctx context.Context) error { return l.v.release(ctx, driver.Any) }

// Release releases exactly g, matched by its Created.
func (l *Lock) Release(ctx context.Context, g lock.Grant) error {
	return l.v.release(ctx, driver.CreatedAt(g.Created))
}

// checkLockValue refuses WithValue on any constructor but NewLock's, and a
// value larger than the largest accepted.
func checkLockValue(k kind, name string, o options) error {
	switch {
	case !o.valueSet:
		return nil
	case k != kindLock:
		return fmt.Errorf("%s: WithValue is for locks only (an election's value is Campaign's): %w", name, primitives.ErrInvalidArgument)
	case len(o.value) > o.maxValue:
		return fmt.Errorf("%s: WithValue: value of %d bytes, more than the %d accepted (WithMaxValueSize): %w",
			name, len(o.value), o.maxValue, primitives.ErrInvalidArgument)
	}
	return nil
}
