package memio

import (
	"sort"
	"sync"
	"time"
)

// Clock is the time a Store runs on: its sessions' TTLs, suspensions and
// deadlines. The default is the real clock; a FakeClock (or a user's own
// Clock) makes them deterministic, so that a test of a 10 s TTL runs in
// microseconds.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call of Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened; it reports whether
	// it did.
	Stop() bool
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// FakeClock is a Clock that moves only when Advance moves it. It is safe for
// concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFakeClock returns a FakeClock that reads start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f for when Advance reaches d from now.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Advance moves the clock on by d and runs, in the order of their times and
// before it returns, every call that falls due; a call scheduled by one
// that runs falls due too if it is within d. The clock never goes back:
// an Advance that ends while another has moved it further leaves it there.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			break
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		c.now = later(c.now, t.at)
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = later(c.now, end)
	c.mu.Unlock()
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

type fakeTimer struct {
	c  *FakeClock
	at time.Time
	f  func()
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}
