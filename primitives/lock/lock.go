// Package lock defines a distributed mutual-exclusion lock with fencing
// tokens, independent of any backend. Each backend's NewLock provides one.
//
// A Service is one owner and is safe for concurrent use, like a sync.Mutex: a
// second Lock from another goroutine of the same Service waits until the
// first hold ends. Every Lock is a fresh acquisition with a new, strictly
// higher fencing token, also when it follows a local Unlock. Attach the token
// to every request made while holding the lock, and have the resource reject
// tokens below the highest it has seen (package fencing/guard): that, not the
// lock alone, is what makes a paused or partitioned former holder harmless.
//
// Do runs fn under one hold. A singleton worker that should keep running
// through lost holds and lost sessions runs under Supervise, which locks
// again after a backoff, on a new Service when the old one is done.
package lock

import (
	"context"
	"errors"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/internal/hold"
)

var (
	// ErrLockTaken is returned by TryLock when another owner holds the lock
	// or waits ahead of this one.
	ErrLockTaken = errors.New("lock: taken")
	// ErrNotHeld is returned by Unlock and Release when the hold they name
	// is not (or no longer) this Service's.
	ErrNotHeld = errors.New("lock: not held")
)

// Service is a distributed lock held by one owner at a time.
type Service interface {
	// Lock blocks until this owner holds the lock and returns the grant. If
	// ctx ends first it returns ctx.Err() and leaves nothing behind.
	Lock(ctx context.Context) (Grant, error)
	// TryLock acquires the lock only if nobody holds it or waits for it;
	// otherwise it returns ErrLockTaken at once.
	TryLock(ctx context.Context) (Grant, error)
	// Unlock releases the current hold; ErrNotHeld if there is none. If it
	// fails (ctx ended, the store did not answer) the hold stands and
	// Unlock may be called again: the retry succeeds, with Released, even if
	// the failed call's delete landed.
	Unlock(ctx context.Context) error
	// Release releases exactly grant g, so a retried Release never frees a
	// later hold; ErrNotHeld if g is no longer held.
	Release(ctx context.Context, g Grant) error
	// Subscribe delivers this owner's events (Acquired, Released, Lost) that
	// happen after it returns. The channel is closed when ctx ends or the
	// Service is done.
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

// Grant describes one hold of the lock.
type Grant struct {
	// FencingToken is strictly greater than every earlier holder's token on
	// this lock. How a backend derives it is in its package doc.
	FencingToken fencing.Token
	// Key is the backend key that represents this hold: never the key of
	// the Service's previous hold, though a backend may reuse names of
	// older ones (each hold's key is created anew). Key and FencingToken
	// alone do not name one hold: Created does.
	Key string
	// LeaseID is the lease (or session) the key is attached to.
	LeaseID int64
	// TTL is the lease's time to live.
	TTL time.Duration
	// Created is the backend's creation sequence of Key (each backend's
	// doc says what it is). It names this hold: no later hold, of this owner or
	// any other, has the same. Release matches by it alone, whatever the
	// other fields say; zero never matches.
	Created int64
}

// Token returns the grant's fencing token.
func (g Grant) Token() fencing.Token { return g.FencingToken }

// releaseTimeout bounds the Release that Do makes after fn returns, which
// runs even when the caller's context has ended.
const releaseTimeout = 10 * time.Second

// Do locks, runs fn with a context that is cancelled the moment ownership is
// lost, and releases the grant after fn returns. It returns fn's error; if
// ownership was lost while fn ran it returns errors.Join(fn's error, an error
// wrapping primitives.ErrLost), or wrapping primitives.ErrClosed if s was
// closed meanwhile (its Close ends the hold). A failed Lock is returned as is and fn is not
// called; a Lock won just as ctx ended is released and Do returns ctx's
// error without calling fn. fn's context also ends when another call of s
// releases the grant (Unlock, Release; the cause wraps
// primitives.ErrReleased, and Do then returns fn's error alone), and, on a
// Service built to cancel at Suspended, at once if the grant comes on a
// suspended session. If fn panics, the grant is released as the panic goes
// on. A nil s or fn is an error wrapping primitives.ErrInvalidArgument.
func Do(ctx context.Context, s Service, fn func(ctx context.Context, g Grant) error) error {
	if err := hold.Check(ctx, "lock.Do", s, fn == nil); err != nil {
		return err
	}
	return hold.Run(ctx, s, hold.Spec[Grant]{Acquire: s.Lock, Created: Grant.created, Key: Grant.key, Release: s.Release,
		NotHeld: ErrNotHeld, ReleaseTimeout: releaseTimeout}, fn)
}

func (g Grant) created() int64 { return g.Created }
func (g Grant) key() string    { return g.Key }
