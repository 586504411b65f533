// Package semaphore defines a distributed counting semaphore with fencing
// tokens, independent of any backend. A backend's NewSemaphore provides
// one.
//
//	s, err := etcdio.NewSemaphore(cli, "/semaphores/exports", 3) // or zkio's, redisio's, memio's
//	err = semaphore.Do(ctx, s, func(ctx context.Context, g semaphore.Grant) error {
//		return export(ctx, g.Scope(), g.Token()) // a guard keyed by slot scope checks it
//	})
//
// A semaphore named by its prefix has N permits, N fixed per name: every user
// of the name must agree on N, and a user that disagrees gets an error
// wrapping ErrPermitMismatch before it holds or leaves anything. At most N
// owners hold a permit at any moment. N is 1 to MaxPermits on every
// backend; any other N is refused with an error wrapping
// primitives.ErrInvalidArgument, before anything is written.
//
// # Slots and fencing
//
// Each holder holds one of N slots, numbered 0 to N-1, and no slot is ever
// held by two owners at once. A grant names its slot and carries a fencing
// token that is strictly greater than every token issued earlier for the
// same name (so also for the same slot). Each slot is its own fencing scope,
// named by Grant.Scope ("<name>#<slot>"), with its own mark: a resource keeps
// one guard (package fencing/guard) per scope and checks a request's token
// against the mark of the scope the request names.
//
// What such a guard promises: a request of a former holder of slot s that
// arrives after a later holder of slot s was admitted is rejected, since the
// later holder's token is higher. What it cannot promise: anything across
// slots. Up to N owners hold at once by design, each in its own slot, and a
// guard of one slot knows nothing of the others: a resource that must never
// see two writers at once needs a lock, not a semaphore. Nor does a guard
// reject a paused former holder whose slot nobody has taken since: its token
// is still the highest of that scope. There is no rule such as "admit the N
// highest tokens": it would admit a stale holder whenever fewer than N
// others had written since.
//
// A Service is one owner and holds at most one permit at a time, like a
// sync.Mutex: a second Acquire from another goroutine of the same Service
// waits until the first hold ends. Use one Service per concurrent worker.
package semaphore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/internal/hold"
)

// MaxPermits is the most permits a semaphore may have, on every backend.
const MaxPermits = 1 << 12

var (
	// ErrNoPermit is returned by TryAcquire when N owners hold or wait ahead.
	ErrNoPermit = errors.New("semaphore: no permit free")
	// ErrNotHeld is returned by Release when the grant it names is not (or
	// no longer) this Service's.
	ErrNotHeld = errors.New("semaphore: not held")
	// ErrPermitMismatch is returned when a user's number of permits differs
	// from the one the name was created with.
	ErrPermitMismatch = errors.New("semaphore: number of permits differs from the name's")
)

// Service is one owner of a semaphore with N permits.
type Service interface {
	// Acquire blocks until this owner holds a permit and returns the grant.
	// Owners are served in the order they asked. If ctx ends first it
	// returns ctx.Err() and leaves nothing behind.
	Acquire(ctx context.Context) (Grant, error)
	// TryAcquire acquires a permit only if fewer than N owners hold or wait
	// for one; otherwise it returns ErrNoPermit at once, leaving nothing
	// behind.
	TryAcquire(ctx context.Context) (Grant, error)
	// Release releases exactly grant g, so a retried Release never frees a
	// later hold; ErrNotHeld if g is no longer held.
	Release(ctx context.Context, g Grant) error
	// Subscribe delivers this owner's events (Acquired, Released, Lost,
	// Suspended, Resumed) that happen after it returns. The channel is
	// closed when ctx ends or the Service is done.
	Subscribe(ctx context.Context) <-chan primitives.Event
	// Done is closed when the Service can no longer be used: its session was
	// lost or Close was called.
	Done() <-chan struct{}
	// Err is nil while the Service is usable; afterwards it wraps
	// primitives.ErrLost or primitives.ErrClosed.
	Err() error
	// Close releases everything the Service holds or waits for, promptly,
	// in the backend too. A later Close returns an error wrapping
	// primitives.ErrClosed once the first has returned.
	Close() error
}

// Grant describes one hold of a permit.
type Grant struct {
	// FencingToken is strictly greater than every token issued earlier for
	// the same name: a backend revision at which this hold owns its slot.
	FencingToken fencing.Token
	// Key is the backend key that represents this hold.
	Key string
	// LeaseID is the lease the key is attached to.
	LeaseID int64
	// TTL is the lease's time to live.
	TTL time.Duration
	// Name is the semaphore's name, as its user passed it (the prefix).
	Name string
	// Slot is the permit slot this hold owns, 0 to N-1: no other owner holds
	// it while this hold lasts.
	Slot int
	// Created is the backend's creation sequence of Key (each backend's
	// doc says what it is). It names this hold: Release matches by it and
	// Slot, whatever the other fields say; zero never matches.
	Created int64
}

// Token returns the grant's fencing token.
func (g Grant) Token() fencing.Token { return g.FencingToken }

// Scope returns the fencing scope of the grant's slot, "<name>#<slot>": the
// scope a resource checks the token against.
func (g Grant) Scope() string { return Scope(g.Name, g.Slot) }

// Scope returns the fencing scope of slot of the semaphore name.
func Scope(name string, slot int) string { return name + "#" + strconv.Itoa(slot) }

// releaseTimeout bounds the Release that Do makes after fn returns.
const releaseTimeout = 10 * time.Second

// Do acquires a permit, runs fn with a context that is cancelled the moment
// the hold is lost, and releases the grant after fn returns. It returns fn's
// error; if the hold was lost while fn ran it returns errors.Join(fn's error,
// an error wrapping primitives.ErrLost, or primitives.ErrClosed if s was
// closed meanwhile). A failed Acquire is returned as is
// and fn is not called; a permit won just as ctx ended is released and Do
// returns ctx's error without calling fn. A nil s or fn is an error wrapping
// primitives.ErrInvalidArgument.
func Do(ctx context.Context, s Service, fn func(ctx context.Context, g Grant) error) error {
	if err := hold.Check(ctx, "semaphore.Do", s, fn == nil); err != nil {
		return err
	}
	return hold.Run(ctx, s, hold.Spec[Grant]{Acquire: s.Acquire, Created: Grant.created, Key: Grant.key, Release: s.Release,
		NotHeld: ErrNotHeld, ReleaseTimeout: releaseTimeout}, fn)
}

func (g Grant) created() int64 { return g.Created }
func (g Grant) key() string    { return g.Key }
