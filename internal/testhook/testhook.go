// Package testhook lets disco's own fault tests freeze a backend's session,
// as a long garbage collection pause or a suspended VM would. It is
// internal: nothing outside this module can use it, and production code
// only ever reads it (a session looks itself up; nothing is registered
// unless a test pauses a session, and until then a lookup is one atomic
// load).
//
// A session's event loop calls Wait on each wake-up; the goroutine that
// renews its lease or key (etcdio's keepalive, redisio's refresher) calls
// WaitRenewal before each renewal.
package testhook

import (
	"sync"
	"sync/atomic"
)

var (
	paused        sync.Map // session (any) -> *pause: loop and renewal
	pausedRenewal sync.Map // session (any) -> *pause: renewal only
	// ever is set by the first pause: until then (always, in production) a
	// lookup costs one atomic load, not a map lookup per wake-up.
	ever atomic.Bool
)

// pause is one pause of a session: until resume is closed. parked closes as
// a goroutine first stops at it.
type pause struct {
	resume     <-chan struct{}
	parked     chan struct{}
	parkedOnce sync.Once
}

func newPause(resume <-chan struct{}) *pause {
	return &pause{resume: resume, parked: make(chan struct{})}
}

// PauseSession freezes session: its event loop and its renewal stop at
// their next step until resume is closed. Calls made meanwhile wait; the
// session is lost if the pause outlasts its TTL.
func PauseSession(session any, resume <-chan struct{}) {
	ever.Store(true)
	paused.Store(session, newPause(resume))
}

// PauseRenewal stops only session's renewal until resume is closed, as when
// renewals cannot reach the server: the loop goes on. The channel it
// returns closes once a goroutine that calls WaitRenewal has stopped at the
// pause (never, if none does). Where one goroutine renews and has each
// renewal's answer before it sends the next (etcdio's keepalive), no renewal
// is under way from then on.
func PauseRenewal(session any, resume <-chan struct{}) (parked <-chan struct{}) {
	ever.Store(true)
	p := newPause(resume)
	pausedRenewal.Store(session, p)
	return p.parked
}

// Wait blocks while session is paused, or until stop is closed.
func Wait(session any, stop <-chan struct{}) {
	if ever.Load() { // inlined: one atomic load per wake-up in production
		wait(&paused, session, stop)
	}
}

// WaitRenewal blocks while session or its renewal is paused, or until stop
// is closed.
func WaitRenewal(session any, stop <-chan struct{}) {
	if ever.Load() {
		wait(&paused, session, stop)
		wait(&pausedRenewal, session, stop)
	}
}

func wait(m *sync.Map, session any, stop <-chan struct{}) {
	v, ok := m.Load(session)
	if !ok {
		return
	}
	p := v.(*pause)
	p.parkedOnce.Do(func() { close(p.parked) })
	select {
	case <-p.resume:
		m.CompareAndDelete(session, v)
	case <-stop:
	}
}
