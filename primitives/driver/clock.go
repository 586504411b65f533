package driver

import "time"

// Change is what a Clock reports a session's liveness did.
type Change int

const (
	// Steady: nothing for the holders to hear.
	Steady Change = iota
	// Suspend: the session went unconfirmed; its holders get Suspended
	// with the clock's Deadline.
	Suspend
	// Resume: the session was confirmed again; its holders get Resumed.
	Resume
	// Expire: the deadline passed with no renewal acknowledged in time; the
	// session and everything it holds are lost.
	Expire
)

func (c Change) String() string {
	switch c {
	case Steady:
		return "steady"
	case Suspend:
		return "suspend"
	case Resume:
		return "resume"
	case Expire:
		return "expire"
	}
	return "Change(?)"
}

// Clock is a session's liveness, counted from the send times of its
// acknowledged renewals: the store renewed the lease no earlier than a
// renewal's send, so the lease surely lives until that send plus its TTL
// (the deadline), and counting from the reply's arrival could overestimate
// it. The holders are Suspended once the session has gone SuspendAfter
// without an acknowledged renewal (or its connection is known broken),
// Resumed by a fresh acknowledgement, and Lost at the deadline; a renewal
// acknowledged after the deadline revives nothing.
//
// A Clock has no goroutines and no timers: the session's loop calls Tick
// when Next comes and Renewed for every acknowledgement, and acts on the
// Change they return. The zero Clock is not usable; see NewClock.
type Clock struct {
	ttl, suspendAfter time.Duration
	lastSent          time.Time // send time of the latest acknowledged renewal
	deadline          time.Time
	broken            time.Time // when the connection was last known broken
	suspended         bool
	expired           bool
}

// NewClock starts the clock of a lease of ttl whose grant was sent at
// granted; its holders are suspended after suspendAfter without an
// acknowledged renewal (at most ttl).
func NewClock(granted time.Time, ttl, suspendAfter time.Duration) Clock {
	return Clock{ttl: ttl, suspendAfter: min(suspendAfter, ttl), lastSent: granted, deadline: granted.Add(ttl)}
}

// SuspendPart is the suspension point of a lease of ttl that is suspended
// after part of it (WithSuspendAfter's fraction).
func SuspendPart(ttl time.Duration, part float64) time.Duration {
	return time.Duration(float64(ttl) * part)
}

// TTL is the lease's time to live.
func (c *Clock) TTL() time.Duration { return c.ttl }

// SuspendAfter is how long without an acknowledged renewal suspends.
func (c *Clock) SuspendAfter() time.Duration { return c.suspendAfter }

// RenewEvery is how often a session renews: a third of the TTL, or two
// thirds of the suspension point if that is sooner (a WithSuspendAfter
// part below 1/2), so that a healthy session is confirmed well before its
// holders would be Suspended, whatever the part: a third of the suspension
// point is left for the round trip (a sixth of the TTL by default).
func (c *Clock) RenewEvery() time.Duration { return min(c.ttl/3, c.suspendAfter*2/3) }

// Deadline is when the lease surely ends unless renewed meanwhile.
func (c *Clock) Deadline() time.Time { return c.deadline }

// LastSent is the send time of the latest acknowledged renewal.
func (c *Clock) LastSent() time.Time { return c.lastSent }

// Suspended reports whether the holders are suspended.
func (c *Clock) Suspended() bool { return c.suspended }

// Expired reports whether the deadline passed (Expire was reported).
func (c *Clock) Expired() bool { return c.expired }

// Renewed records, at now, the acknowledgement of a renewal sent at sent
// that gave the lease ttl from then (0: the clock's TTL). It reports Expire
// if the deadline had passed (the acknowledgement came too late), Resume if
// it confirms a suspended session, else Steady.
func (c *Clock) Renewed(sent, now time.Time, ttl time.Duration) Change {
	if c.expired {
		return Steady
	}
	if c.expire(now) {
		return Expire
	}
	if ttl <= 0 {
		ttl = c.ttl
	}
	if d := sent.Add(ttl); d.After(c.deadline) {
		c.deadline = d
	}
	if sent.After(c.lastSent) {
		c.lastSent = sent
	}
	if c.suspended && now.Sub(c.lastSent) < c.suspendAfter && c.lastSent.After(c.broken) {
		c.suspended = false
		return Resume
	}
	return Steady
}

// Broken records that the session's connection is known broken at now: the
// holders are suspended at once, and only a renewal sent afterwards resumes
// them. It reports Suspend if they were not suspended yet.
func (c *Clock) Broken(now time.Time) Change {
	if c.expired {
		return Steady
	}
	if now.After(c.broken) {
		c.broken = now
	}
	if c.suspended {
		return Steady
	}
	c.suspended = true
	return Suspend
}

// Mended records that the connection known broken is whole again at now,
// by the store's own account (memio's Resume) rather than by a renewal's
// round trip: a renewal sent at now then counts as sent after the break,
// even on a clock that cannot tell the two instants apart (a fake clock
// that did not move).
func (c *Clock) Mended(now time.Time) {
	if !now.Before(c.broken) {
		c.broken = time.Time{}
	}
}

// Tick checks the clock at now: Expire at or past the deadline, Suspend at
// or past the suspension point, else Steady. Each is reported once.
func (c *Clock) Tick(now time.Time) Change {
	switch {
	case c.expired:
		return Steady
	case c.expire(now):
		return Expire
	case !c.suspended && !now.Before(c.lastSent.Add(c.suspendAfter)):
		c.suspended = true
		return Suspend
	}
	return Steady
}

// expire marks the clock expired if now is at or past the deadline, and
// reports whether it did.
func (c *Clock) expire(now time.Time) bool {
	if !now.Before(c.deadline) {
		c.expired = true
	}
	return c.expired
}

// Next is when Tick has something to report unless a renewal comes first:
// the suspension point, or the deadline once suspended. It is the zero time
// once expired.
func (c *Clock) Next() time.Time {
	if c.expired {
		return time.Time{}
	}
	if at := c.lastSent.Add(c.suspendAfter); !c.suspended && at.Before(c.deadline) {
		return at
	}
	return c.deadline
}
