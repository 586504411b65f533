package driver

import (
	"context"
	"time"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/internal/nilness"
	"github.com/ahrtr/disco/internal/quote"
)

// What follows is what the backends share beyond the engine: how a name
// shows in an error, how a constructor tells a nil client, how Close waits
// for requests left under way, how retries are paced. A backend in another
// module (k8sio is one) builds on this package alone, never on this
// module's internal packages.

// QuoteName shows a name a user gave in an error message: quoted in full
// when it has at most 64 bytes, otherwise its start, cut at a rune's
// boundary, and its length, so that a name of a kilobyte does not fill the
// message. Every backend shows names this way.
func QuoteName(name string) string { return quote.Name(name) }

// IsNil reports whether v is nil in effect: a nil interface, or one holding
// a nil pointer, map, channel, func, slice or interface. A constructor
// given a typed nil client (a nil *T returned as an interface) checks it
// with IsNil, as a comparison with nil passes it.
func IsNil(v any) bool { return nilness.Is(v) }

// Inflight counts work under way on other goroutines (a request its caller
// left, a withdrawal), so that what must not return before that work is
// done (a service's Close) can wait for it. Add counts one more piece, Done
// one less (each Add needs one Done), and Wait(ctx) returns true once none
// is under way, false if ctx ends first. Unlike a sync.WaitGroup, Add may
// come while Wait waits. The zero value counts none; a nil *Inflight's
// methods do nothing, and its Wait returns true at once.
type Inflight = inflight.Counter

// Backoff is the growing wait between the tries of a request repeated
// until it succeeds: each Wait(ctx) sleeps the current delay, or until ctx
// ends (it reports whether it slept the whole delay), and doubles the
// next, up to a cap. Not safe for concurrent use.
type Backoff = ctxtime.Backoff

// NewBackoff returns a Backoff whose first wait is first and whose waits
// grow no longer than max.
func NewBackoff(first, max time.Duration) *Backoff { return ctxtime.NewBackoff(first, max) }

// Sleep waits for d or until ctx ends, and reports whether it waited the
// whole d.
func Sleep(ctx context.Context, d time.Duration) bool { return ctxtime.Sleep(ctx, d) }

// WithDone returns a context that ends when ctx does or done is closed
// (a service's Done), whichever is first; cancel releases it and must be
// called.
func WithDone(ctx context.Context, done <-chan struct{}) (context.Context, context.CancelFunc) {
	return ctxtime.WithDone(ctx, done)
}
