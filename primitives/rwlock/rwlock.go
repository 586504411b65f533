// Package rwlock defines a distributed read/write lock with fencing tokens,
// independent of any backend. Each backend's NewRWLock provides one.
//
// Readers never block each other. Lock waits until every reader and writer
// that registered before it has released; RLock waits until every writer that
// registered before it has released, so a waiting writer is not starved by
// readers that come after it.
//
// Tokens let one fencing guard protect reads and writes alike:
//   - readers that hold the lock at the same time hold the same token, even
//     when one arrived long after the other;
//   - a reader's token is strictly greater than that of every writer that
//     held the lock before it;
//   - a writer's token is strictly greater than every token, read or write,
//     issued before it acquired.
//
// A Service is one owner and holds at most one grant, read or write, at a
// time: a second RLock or Lock from another goroutine of the same Service
// waits until the first grant is released, as with lock.Service.
//
// So there is no upgrade, downgrade or nesting. A Lock (or a second RLock)
// by a Service that holds a read grant does not turn it into a write grant
// (or share it): it waits for that grant's release, and called from the
// goroutine that holds it, it waits until its context ends and then
// returns ctx.Err(), the read grant still held; TryLock and TryRLock fail
// at once with ErrRWLockTaken. To write after reading, RUnlock, then Lock:
// another writer may come between, so read again under the write grant.
// (A second Service of the same process cannot help: its Lock waits for
// the first Service's read grant like anyone's.)
package rwlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/internal/hold"
)

// Mode says whether a grant is shared (Read) or exclusive (Write).
type Mode int

const (
	// Read is a shared grant: other readers may hold the lock too.
	Read Mode = iota
	// Write is an exclusive grant.
	Write
)

func (m Mode) String() string {
	switch m {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

var (
	// ErrRWLockTaken is returned by TryRLock when a writer holds or waits,
	// and by TryLock when anyone holds or waits.
	ErrRWLockTaken = errors.New("rwlock: taken")
	// ErrNotHeld is returned by RUnlock, Unlock and Release when the grant
	// they name is not (or no longer) held by this Service.
	ErrNotHeld = errors.New("rwlock: not held")
)

// Service is a distributed read/write lock.
type Service interface {
	// RLock blocks until this owner holds the lock for reading. If ctx
	// ends first it returns ctx.Err() and leaves nothing behind.
	RLock(ctx context.Context) (Grant, error)
	// TryRLock acquires for reading only if no writer holds or waits;
	// otherwise ErrRWLockTaken at once.
	TryRLock(ctx context.Context) (Grant, error)
	// RUnlock releases the current read grant; ErrNotHeld if there is none.
	RUnlock(ctx context.Context) error
	// Lock blocks until this owner holds the lock for writing. If ctx ends
	// first it returns ctx.Err() and leaves nothing behind.
	Lock(ctx context.Context) (Grant, error)
	// TryLock acquires for writing only if nobody holds or waits;
	// otherwise ErrRWLockTaken at once.
	TryLock(ctx context.Context) (Grant, error)
	// Unlock releases the current write grant; ErrNotHeld if there is none.
	Unlock(ctx context.Context) error
	// Release releases exactly grant g, read or write; ErrNotHeld if g is
	// no longer held.
	Release(ctx context.Context, g Grant) error
	// Subscribe delivers this owner's Acquired, Released and Lost events.
	Subscribe(ctx context.Context) <-chan primitives.Event
	// Done is closed when the Service can no longer be used.
	Done() <-chan struct{}
	// Err is nil while the Service is usable; then it wraps
	// primitives.ErrLost or primitives.ErrClosed.
	Err() error
	// Close releases everything the Service holds or waits for. A later
	// Close returns an error wrapping primitives.ErrClosed once the first
	// has returned.
	Close() error
}

// Grant describes one hold of the lock.
type Grant struct {
	FencingToken fencing.Token
	Key          string
	LeaseID      int64
	TTL          time.Duration
	Mode         Mode
	// Created is the backend's creation sequence of Key (each backend's
	// doc says what it is). It names this grant: readers of one epoch share a
	// token, but no two grants share Created. Release matches by it alone,
	// whatever the other fields (Mode included) say; zero never matches.
	Created int64
}

// Token returns the grant's fencing token.
func (g Grant) Token() fencing.Token { return g.FencingToken }

const releaseTimeout = 10 * time.Second

// DoRead read-locks, runs fn with a context cancelled the moment the grant
// is lost, and releases after fn returns; errors as lock.Do.
func DoRead(ctx context.Context, s Service, fn func(ctx context.Context, g Grant) error) error {
	if err := hold.Check(ctx, "rwlock.DoRead", s, fn == nil); err != nil {
		return err
	}
	return do(ctx, s, s.RLock, fn)
}

// DoWrite write-locks, runs fn with a context cancelled the moment the grant
// is lost, and releases after fn returns; errors as lock.Do.
func DoWrite(ctx context.Context, s Service, fn func(ctx context.Context, g Grant) error) error {
	if err := hold.Check(ctx, "rwlock.DoWrite", s, fn == nil); err != nil {
		return err
	}
	return do(ctx, s, s.Lock, fn)
}

func do(ctx context.Context, s Service, acquire func(context.Context) (Grant, error), fn func(ctx context.Context, g Grant) error) error {
	return hold.Run(ctx, s, hold.Spec[Grant]{Acquire: acquire, Created: Grant.created, Key: Grant.key, Release: s.Release,
		NotHeld: ErrNotHeld, ReleaseTimeout: releaseTimeout}, fn)
}

func (g Grant) created() int64 { return g.Created }
func (g Grant) key() string    { return g.Key }
