// Package primitives is the vocabulary every disco primitive shares: the
// ownership events a subscriber receives and the two errors that end a
// primitive's life.
//
// Events describe one owner's view. Acquired, Released and Lost are about this
// owner's own hold (a lock grant, a read or write grant, a term as leader);
// LeaderChanged reports whoever leads an election, this owner or another.
//
// Delivery rules, which every Subscribe in disco follows: a subscription
// receives every event that happens after Subscribe returns, in order.
// Acquired, Released and Lost are never dropped or coalesced. LeaderChanged may
// be coalesced for a subscriber that reads slowly, but the latest one is always
// delivered. A slow subscriber never stalls the event loop that feeds it.
package primitives

import (
	"errors"

	"github.com/ahrtr/disco/fencing"
)

// Event is one ownership event. The set of events is closed: Acquired,
// Released, Lost and LeaderChanged.
type Event interface{ event() }

// Acquired reports that this owner now holds Key, and that requests made on its
// behalf must carry Token.
type Acquired struct {
	Key   string
	Token fencing.Token
}

// Released reports that this owner let go of Key voluntarily (Unlock, Release,
// Resign or Close).
type Released struct {
	Key   string
	Token fencing.Token
}

// Lost reports that this owner's hold on Key ended without its asking: its
// session died or its key was deleted by someone else. Err says why and wraps
// ErrLost.
type Lost struct {
	Key   string
	Token fencing.Token
	Err   error
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
func (LeaderChanged) event() {}

var (
	// ErrLost means ownership ended involuntarily. When the session or its lease
	// is gone, every later call of the primitive fails with an error wrapping
	// ErrLost.
	ErrLost = errors.New("disco: ownership lost")
	// ErrClosed means Close was called; every later call fails with an error
	// wrapping it.
	ErrClosed = errors.New("disco: closed")
)

// Coalescable reports whether e may be replaced by a later event of the same
// kind when a subscriber falls behind. Only LeaderChanged is.
func Coalescable(e Event) bool {
	_, ok := e.(LeaderChanged)
	return ok
}
