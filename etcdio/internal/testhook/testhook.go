// Package testhook lets disco's own fault tests freeze a session. It is
// internal: nothing outside etcdio can use it, and production code only ever
// reads it (a session looks itself up; nothing is registered unless a test
// pauses a session).
package testhook

import (
	"sync"
	"sync/atomic"
)

var (
	paused      sync.Map // session (any) -> <-chan struct{}: loop and keepalive
	pausedRenew sync.Map // session (any) -> <-chan struct{}: keepalive only
	// ever is set by the first pause: until then (always, in production) a
	// lookup costs one atomic load, not a map lookup per loop wake-up.
	ever atomic.Bool
)

// PauseSession freezes session (an *etcdio.Session) as a long garbage
// collection pause or a suspended VM would: its event loop and its keepalive
// stop at their next step until resume is closed. Calls made meanwhile wait;
// the lease expires if the pause outlasts it.
func PauseSession(session any, resume <-chan struct{}) {
	ever.Store(true)
	paused.Store(session, resume)
}

// PauseKeepalive stops only session's keepalive until resume is closed, as
// when keepalives cannot reach etcd: the loop goes on.
func PauseKeepalive(session any, resume <-chan struct{}) {
	ever.Store(true)
	pausedRenew.Store(session, resume)
}

// Wait blocks while session is paused, or until stop is closed. The loop
// calls it.
func Wait(session any, stop <-chan struct{}) {
	if ever.Load() { // inlined: one atomic load per wake-up in production
		wait(&paused, session, stop)
	}
}

// WaitKeepalive blocks while session or its keepalive is paused, or until
// stop is closed. The keepalive calls it.
func WaitKeepalive(session any, stop <-chan struct{}) {
	wait(&paused, session, stop)
	wait(&pausedRenew, session, stop)
}

func wait(m *sync.Map, session any, stop <-chan struct{}) {
	if !ever.Load() {
		return
	}
	v, ok := m.Load(session)
	if !ok {
		return
	}
	resume := v.(<-chan struct{})
	select {
	case <-resume:
		m.CompareAndDelete(session, v)
	case <-stop:
	}
}
