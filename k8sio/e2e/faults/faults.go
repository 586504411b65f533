// Package faults cuts or pauses one client's traffic to the API server, to
// hurt one k8sio session the way a partition or a long pause would.
package faults

import (
	"errors"
	"io"
	"net/http"
	"sync"
)

// ErrCut is what a request gets while its client is cut off.
var ErrCut = errors.New("faults: cut off from the API server")

// Link is one client's connection to the API server: Wrap it into the
// client's transport (rest.Config.Wrap).
type Link struct {
	mu     sync.Mutex
	cut    bool
	paused bool
	// matching holds the requests any of its functions match, until Heal.
	matching []func(*http.Request) bool
	changed  chan struct{} // closed and replaced at every change
	bodies   map[*body]struct{}
	held     map[*http.Request]struct{} // requests waiting at a pause
}

// New returns a healthy link.
func New() *Link {
	return &Link{changed: make(chan struct{}), bodies: map[*body]struct{}{}, held: map[*http.Request]struct{}{}}
}

// Held reports how many requests that match wait at a pause now.
func (l *Link) Held(match func(*http.Request) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for req := range l.held {
		if match(req) {
			n++
		}
	}
	return n
}

// Wrap is a rest.Config transport wrapper.
func (l *Link) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if err := l.gateRequest(req); err != nil {
			return nil, err
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		b := &body{rc: resp.Body, l: l, closed: make(chan struct{}), ended: req.Context().Done()}
		l.mu.Lock()
		l.bodies[b] = struct{}{}
		l.mu.Unlock()
		resp.Body = b
		return resp, nil
	})
}

// Cut makes every request fail and ends every response being read (watches
// included), until Heal.
func (l *Link) Cut() {
	l.set(func() { l.cut = true })
	l.mu.Lock()
	bs := make([]*body, 0, len(l.bodies))
	for b := range l.bodies {
		bs = append(bs, b)
	}
	l.mu.Unlock()
	for _, b := range bs {
		b.rc.Close()
	}
}

// Pause holds every request and every read of a response until Heal, as a
// process that does not run would; a request whose context ends gives up.
func (l *Link) Pause() { l.set(func() { l.paused = true }) }

// PauseMatching holds every request match accepts (not the reads of
// responses already under way) until Heal, as an API server that does not
// answer those requests would; a request whose context ends gives up. The
// other requests go on. Each call adds match to those of earlier calls.
func (l *Link) PauseMatching(match func(*http.Request) bool) {
	l.set(func() { l.matching = append(l.matching, match) })
}

// Heal ends a Cut, a Pause and every PauseMatching.
func (l *Link) Heal() { l.set(func() { l.cut, l.paused, l.matching = false, false, nil }) }

func (l *Link) set(f func()) {
	l.mu.Lock()
	f()
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// gateRequest is gate for a request, counted in Held while it waits.
func (l *Link) gateRequest(req *http.Request) error {
	l.mu.Lock()
	l.held[req] = struct{}{}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.held, req)
		l.mu.Unlock()
	}()
	return l.gate(req.Context().Done(), nil, req)
}

// gate waits while the link is paused (or, for a request req, while a
// PauseMatching holds it), until stop or end is closed (a nil one never
// is); ErrCut if it is cut.
func (l *Link) gate(stop, end <-chan struct{}, req *http.Request) error {
	for {
		l.mu.Lock()
		cut, paused, changed := l.cut, l.paused, l.changed
		for _, m := range l.matching {
			if req != nil && m(req) {
				paused = true
			}
		}
		l.mu.Unlock()
		switch {
		case cut:
			return ErrCut
		case !paused:
			return nil
		}
		select {
		case <-changed:
		case <-stop:
			return ErrCut
		case <-end:
			return ErrCut
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type body struct {
	rc     io.ReadCloser
	l      *Link
	once   sync.Once
	closed chan struct{}
	// ended is the request's context's end: a read held at a pause gives
	// up with it, as a read of a connection the transport closes would.
	ended <-chan struct{}
}

func (b *body) Read(p []byte) (int, error) {
	if err := b.l.gate(b.closed, b.ended, nil); err != nil {
		return 0, err
	}
	return b.rc.Read(p)
}

func (b *body) Close() error {
	b.once.Do(func() {
		close(b.closed)
		b.l.mu.Lock()
		delete(b.l.bodies, b)
		b.l.mu.Unlock()
	})
	return b.rc.Close()
}
