// Package testhook lets disco's own fault tests reach into a session. It is
// internal: nothing outside etcdio can use it.
package testhook

// PauseSession, set by etcdio, freezes a *etcdio.Session as a long garbage
// collection pause or a suspended VM would: its event loop and its keepalive
// stop until resume is closed. Calls made meanwhile wait; the lease expires
// if the pause outlasts it.
var PauseSession func(session any, resume <-chan struct{})
