// Package primitives is the vocabulary every disco primitive shares: the
// ownership events a subscriber receives and the two errors that end a
// primitive's life.
//
// Events describe one owner's view. Acquired, Released, Lost, Suspended and
// Resumed are about this owner's own hold (a lock grant, a read or write
// grant, a term as leader), named by its Created: the backend's creation
// sequence of the hold's key (each backend's doc says what it is), which no later hold
// of any owner repeats. LeaderChanged reports whoever leads an election, this
// owner or another.
//
// Delivery rules, which every Subscribe in disco follows: a subscription
// receives every event that happens after Subscribe returns, in order.
// Acquired, Released, Lost, Suspended and Resumed are never dropped or
// coalesced. LeaderChanged may be coalesced for a subscriber that reads
// slowly, but the latest one is always delivered. A slow subscriber never
// stalls the event loop that feeds it.
//
// The vocabulary may grow: a type switch over events must tolerate kinds it
// does not know (give it a default case that ignores them).
//
// A nil context is bad input, as anywhere in disco: every call of a
// primitive given one (Lock, Release, Campaign, Leader, a barrier's Wait,
// lock.Do, ...) fails at once with an error wrapping ErrInvalidArgument,
// writes nothing and leaves any hold as it was; Subscribe and Observe
// return a channel that is already closed.
//
// The life of one hold, as its owner sees it:
//
//	Acquired ─┬─> Released                      (Unlock, Resign, Close)
//	          ├─> Lost                          (key deleted, session gone)
//	          └─> Suspended ─┬─> Resumed ─> ... (the session recovered in time)
//	                         ├─> Released       (let go while suspended, e.g. by
//	                         │                   Do or Lead cancelled at Suspended)
//	                         └─> Lost           (the session did not recover)
//
// A supervisor (election.Supervise, lock.Supervise) strings such lives
// together: after a Lost it waits a backoff and acquires again, on a new
// service if the session is gone, so the next Acquired carries a higher
// token.
package primitives

import (
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/fencing"
)

// Event is one ownership event: Acquired, Released, Lost, Suspended,
// Resumed or LeaderChanged. Only this package defines events.
type Event interface{ event() }

// Acquired reports that this owner now holds Key, and that requests made on its
// behalf must carry Token.
type Acquired struct {
	Key   string
	Token fencing.Token
	// Created names the hold: the backend's creation sequence of Key.
	Created int64
}

// Released reports that this owner let go of Key voluntarily (Unlock, Release,
// Resign or Close).
type Released struct {
	Key     string
	Token   fencing.Token
	Created int64
}

// Lost reports that this owner's hold on Key ended without its asking: its
// session died or its key was deleted by someone else. Err says why and wraps
// ErrLost.
type Lost struct {
	Key     string
	Token   fencing.Token
	Created int64
	Err     error
}

// Suspended reports that the backend has not confirmed this owner's session
// for a while: the hold may end at Deadline, the earliest moment anyone else
// can acquire it. Until Resumed, the owner should treat every write as
// possibly late. Lost follows if the session is not confirmed by Deadline.
type Suspended struct {
	Key      string
	Token    fencing.Token
	Created  int64
	Deadline time.Time
}

// Resumed reports that the session was confirmed again after Suspended: the
// hold is intact.
type Resumed struct {
	Key     string
	Token   fencing.Token
	Created int64
}

// LeaderChanged reports the leader of an election as seen by this candidate or
// observer. Key == "" means nobody leads.
type LeaderChanged struct {
	Key, Value string
	Token      fencing.Token
}

func (Acquired) event()      {}
func (Released) event()      {}
func (Lost) event()          {}
func (Suspended) event()     {}
func (Resumed) event()       {}
func (LeaderChanged) event() {}

var (
	// ErrLost means ownership ended involuntarily. When the session or its lease
	// is gone, every later call of the primitive fails with an error wrapping
	// ErrLost.
	ErrLost = errors.New("disco: ownership lost")
	// ErrClosed means Close was called; every later call fails with an error
	// wrapping it.
	ErrClosed = errors.New("disco: closed")
	// ErrInvalidArgument is wrapped by the errors of calls given bad input,
	// such as a nil context, or a nil Service or a nil fn for lock.Do or
	// election.Lead.
	ErrInvalidArgument = errors.New("disco: invalid argument")
	// ErrSuspended is the cause of a Do or Lead context cancelled at
	// Suspended, for a service built to cancel there.
	ErrSuspended = errors.New("disco: ownership suspended")
	// ErrReleased is the cause of a Do or Lead context ended because the
	// grant was released by another call of its owner (Unlock, Release,
	// Resign) while fn ran: another owner may hold now.
	ErrReleased = errors.New("disco: grant released")
)

// SuspendedError is the cause of a Do or Lead context ended at Suspended
// (for a service built to cancel there): it wraps ErrSuspended and says
// when the hold may end, so that fn can stop its work before then.
type SuspendedError struct {
	Key      string
	Deadline time.Time // Suspended.Deadline: the hold may end from then on
}

func (e *SuspendedError) Error() string {
	return fmt.Sprintf("hold %s suspended, may end at %s: %v", e.Key, e.Deadline.Format(time.RFC3339Nano), ErrSuspended)
}

// Unwrap returns ErrSuspended.
func (e *SuspendedError) Unwrap() error { return ErrSuspended }

// Coalescable reports whether e may be replaced by a later event of the same
// kind when a subscriber falls behind. Only LeaderChanged is.
func Coalescable(e Event) bool {
	_, ok := e.(LeaderChanged)
	return ok
}

// SuspendCanceler is implemented by a service that can be built to end the
// context lock.Do, rwlock.DoRead, rwlock.DoWrite and election.Lead hand to fn
// at Suspended, rather than only at Lost (every backend's WithCancelOnSuspend), for
// owners that would rather pause than risk a late write. Do and Lead then
// return an error wrapping ErrSuspended with fn's.
type SuspendCanceler interface {
	CancelOnSuspend() bool
}
