package driver

import (
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// Hold is one grant a service holds: a key it created in its store and holds
// until it deletes it (a release), someone else does, or the session ends.
// A Hold is born whole, its token included.
type Hold struct {
	// Key is the store's name of the grant's key (or znode).
	Key string
	// Created is the store's creation sequence of Key; it names the grant,
	// and zero never names one.
	Created int64
	// Token is the grant's fencing token.
	Token fencing.Token
	// Mode is a read/write lock grant's mode; it means nothing for other
	// kinds.
	Mode rwlock.Mode
	// Value is an election term's value.
	Value string
	// Slot is a semaphore permit's slot; it means nothing for other kinds.
	Slot int
	// LeaseID is the lease or session the key is bound to.
	LeaseID int64
	// Waited says the grant came after waiting behind another owner.
	Waited bool
	// Since is when the grant was recorded (Shell.Grant sets it).
	Since time.Time

	releasing int // releases in flight (see Shell.BeginRelease)
	// releaseFailed: a release failed, and may have deleted the key all
	// the same (see Shell.SettleRelease).
	releaseFailed bool
}

// Acquired is the event that announces the grant.
func (h Hold) Acquired() primitives.Event {
	return h.acquired()
}

func (h Hold) acquired() primitives.Acquired {
	return primitives.Acquired{Key: h.Key, Token: h.Token, Created: h.Created}
}

// Released is the event of the grant's voluntary end.
func (h Hold) Released() primitives.Event {
	return primitives.Released{Key: h.Key, Token: h.Token, Created: h.Created}
}

// Lost is the event of the grant's involuntary end; err says why and wraps
// primitives.ErrLost.
func (h Hold) Lost(err error) primitives.Event {
	return primitives.Lost{Key: h.Key, Token: h.Token, Created: h.Created, Err: err}
}

// Suspended is the event that the grant's session went unconfirmed and may
// end at deadline.
func (h Hold) Suspended(deadline time.Time) primitives.Event {
	return primitives.Suspended{Key: h.Key, Token: h.Token, Created: h.Created, Deadline: deadline}
}

// Resumed is the event that the grant's session was confirmed again.
func (h Hold) Resumed() primitives.Event {
	return primitives.Resumed{Key: h.Key, Token: h.Token, Created: h.Created}
}

// Releasing reports whether a release of the grant is in flight: the
// deletion of its key is the release's, not a loss.
func (h Hold) Releasing() bool { return h.releasing > 0 }

// Match says which hold a release (or another request on the current hold)
// means.
type Match func(Hold) bool

// CreatedAt matches the hold created at created; zero never matches. It
// is how every Release and ResignTerm names its grant: Created alone.
func CreatedAt(created int64) Match {
	return func(h Hold) bool { return created != 0 && h.Created == created }
}

// InMode matches any hold of mode m.
func InMode(m rwlock.Mode) Match {
	return func(h Hold) bool { return h.Mode == m }
}

// Any matches whatever the service holds.
func Any(Hold) bool { return true }
