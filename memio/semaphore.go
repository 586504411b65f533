package memio

import (
	"context"
	"fmt"

	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// NewSemaphore returns an owner of the semaphore on name in st with n
// permits (1 to semaphore.MaxPermits). Every user of the name must agree on n: the first sets it, and a
// user that disagrees gets an error wrapping semaphore.ErrPermitMismatch.
// The first n waiters hold, each in the lowest free slot; a slot's token is
// the revision of its grant, above every token the name issued before.
func NewSemaphore(st *Store, name string, n int, opts ...Option) (semaphore.Service, error) {
	if n < 1 || n > semaphore.MaxPermits {
		return nil, fmt.Errorf("memio: new semaphore %s: %d permits, want 1 to %d: %w", quote.Name(name), n, semaphore.MaxPermits, ErrInvalidArgument)
	}
	// The name's count is recorded once the user is made: a refused one
	// leaves none.
	svc, _, err := newService(st, kindSemaphore, name, opts)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	have, set := st.permits[name]
	if !set {
		st.permits[name] = n
	}
	if !set || have == n {
		svc.q.permits = n
	}
	st.mu.Unlock()
	if set && have != n {
		svc.Close()
		return nil, fmt.Errorf("memio: new semaphore %s: the name has %d permits, this user %d: %w",
			quote.Name(name), have, n, semaphore.ErrPermitMismatch)
	}
	return semService{svc}, nil
}

type semService struct{ *service }

func (m semService) grant(h driver.Hold, err error) (semaphore.Grant, error) {
	if err != nil {
		return semaphore.Grant{}, err
	}
	return semaphore.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: m.s.ttl,
		Name: m.name, Slot: h.Slot, Created: h.Created}, nil
}

func (m semService) Acquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.acquire(ctx, rwlock.Write, "", false))
}

func (m semService) TryAcquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.acquire(ctx, rwlock.Write, "", true))
}

func (m semService) Release(ctx context.Context, g semaphore.Grant) error {
	at := driver.CreatedAt(g.Created)
	return m.release(ctx, func(h driver.Hold) bool { return at(h) && h.Slot == g.Slot })
}

// GrantScope returns the scope of the slot the grant a announced holds,
// while it holds.
func (m semService) GrantScope(a primitives.Acquired) (string, bool) {
	h, ok := m.Current()
	if !ok || h.Created != a.Created {
		return "", false
	}
	return semaphore.Scope(m.name, h.Slot), true
}
