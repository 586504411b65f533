package redisio

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// semService is semaphore.Service on a session: a service of kind
// kindSemaphore.
type semService struct {
	face
	v *service
}

var _ semaphore.Service = (*semService)(nil)

// NewSemaphore returns an owner of the semaphore name with n permits on
// cli. Every user of the name must agree on n: the first one's n is
// written to name/permits (never deleted), and a user with another n gets
// an error wrapping semaphore.ErrPermitMismatch before it holds or writes
// anything. A semaphore has the lock's layout (name/seq, name/queue,
// name/held, a hold per acquisition name/<Created>), so it must not share
// its name with a lock, an rwlock or an election. Owners are served first
// come, first served: a hold is granted, in the script that counts it, when
// fewer than n holds are granted and fewer waiters than the free permits
// are queued ahead of it. It takes the lowest free slot (0 to n-1, recorded
// with the hold, so that a slot is never held twice) and a token that is a
// new increment of the name's counter: strictly above every token issued
// before for the name, and so for the slot, whose fencing scope is
// name#slot (semaphore.Scope). A hold lives, is refreshed, is lost and is
// released as a lock's hold is (see the package doc), and a release wakes
// the first waiter, which, granted, wakes the next while permits are free.
// Options and other bad input as NewLock; n below 1 or above
// semaphore.MaxPermits is an error wrapping primitives.ErrInvalidArgument.
func NewSemaphore(cli *redis.Client, name string, n int, opts ...Option) (semaphore.Service, error) {
	if n < 1 || n > semaphore.MaxPermits {
		return nil, fmt.Errorf("redisio: semaphore %q: %d permits, want 1 to %d: %w", name, n, semaphore.MaxPermits, primitives.ErrInvalidArgument)
	}
	v, err := newService(cli, name, kindSemaphore, append(opts[:len(opts):len(opts)], func(o *options) { o.permits = n }))
	if err != nil {
		return nil, err
	}
	return &semService{v, v}, nil
}

// checkPermits sets the semaphore name's N to n if it has none, and fails
// with an error wrapping semaphore.ErrPermitMismatch if it has another.
func checkPermits(ctx context.Context, cli *redis.Client, name string, n int) error {
	have, err := semPermitsScript.Run(ctx, cli, []string{name + "/permits"}, n).Int()
	if err != nil {
		return fmt.Errorf("redisio: semaphore %q: permits: %w", name, err)
	}
	if have != n {
		return fmt.Errorf("redisio: semaphore %q: the name has %d permits, this user %d: %w", name, have, n, semaphore.ErrPermitMismatch)
	}
	return nil
}

func (m *semService) grant(h driver.Hold, err error) (semaphore.Grant, error) {
	if err != nil {
		return semaphore.Grant{}, err
	}
	return semaphore.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: m.v.s.ttl,
		Name: m.v.name, Slot: h.Slot, Created: h.Created}, nil
}

// Acquire blocks until this owner holds a permit.
func (m *semService) Acquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.v.acquire(ctx, false, "", rwlock.Write))
}

// TryAcquire takes a permit only if fewer than n owners hold or wait.
func (m *semService) TryAcquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.v.acquire(ctx, true, "", rwlock.Write))
}

// Release releases exactly g, matched by its Created and slot.
func (m *semService) Release(ctx context.Context, g semaphore.Grant) error {
	at := driver.CreatedAt(g.Created)
	return m.v.release(ctx, func(h driver.Hold) bool { return at(h) && h.Slot == g.Slot })
}

// GrantScope makes the semaphore a primitives.GrantScoper: the scope of
// the slot held by the grant a announced, while it holds.
func (m *semService) GrantScope(a primitives.Acquired) (string, bool) {
	h, ok := m.v.Current()
	if !ok || h.Created != a.Created {
		return "", false
	}
	return semaphore.Scope(m.v.name, h.Slot), true
}
