// Package testhook lets redisio's own fault tests freeze a session. It is
// internal: nothing outside redisio can use it, and production code only
// reads it (nothing is registered unless a test pauses a session).
package testhook

import "sync"

var paused sync.Map // session (any) -> <-chan struct{}

// PauseSession freezes session (a *redisio.Session) as a long garbage
// collection pause would: its event loop and its refresher stop at their
// next step until resume is closed. The session's key expires if the pause
// outlasts its TTL.
func PauseSession(session any, resume <-chan struct{}) { paused.Store(session, resume) }

// Wait blocks while session is paused, or until stop is closed.
func Wait(session any, stop <-chan struct{}) {
	v, ok := paused.Load(session)
	if !ok {
		return
	}
	resume := v.(<-chan struct{})
	select {
	case <-resume:
		paused.CompareAndDelete(session, v)
	case <-stop:
	}
}
