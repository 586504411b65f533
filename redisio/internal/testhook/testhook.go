// Package testhook lets redisio's own fault tests freeze a session. It is
// internal: nothing outside redisio can use it, and production code only
// reads it (nothing is registered unless a test pauses a session).
package testhook

import "sync"

var (
	paused        sync.Map // session (any) -> <-chan struct{}: loop and refresher
	pausedRefresh sync.Map // session (any) -> <-chan struct{}: refresher only
)

// PauseSession freezes session (a *redisio.Session) as a long garbage
// collection pause would: its event loop and its refresher stop at their
// next step until resume is closed. The session's key expires if the pause
// outlasts its TTL.
func PauseSession(session any, resume <-chan struct{}) { paused.Store(session, resume) }

// PauseRefresh stops only session's refresher until resume is closed, as
// when its refreshes cannot reach Redis: the loop goes on.
func PauseRefresh(session any, resume <-chan struct{}) { pausedRefresh.Store(session, resume) }

// Wait blocks while session is paused, or until stop is closed. The loop
// calls it.
func Wait(session any, stop <-chan struct{}) { wait(&paused, session, stop) }

// WaitRefresh blocks while session or its refresher is paused, or until
// stop is closed. The refresher calls it.
func WaitRefresh(session any, stop <-chan struct{}) {
	wait(&paused, session, stop)
	wait(&pausedRefresh, session, stop)
}

func wait(m *sync.Map, session any, stop <-chan struct{}) {
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
