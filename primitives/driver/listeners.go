package driver

import (
	"context"
	"sync/atomic"
)

// Listeners counts who listens to a service's news of its store: its
// event subscriptions (Shell.Subscribe, when Spec.Listeners is set) and an
// election's observations, each while its context lives. A driver follows
// what only listeners need (who leads an election, and each change of it)
// while Listening is true, and stops when it turns false: a candidate that
// nobody listens to only waits for its own turn.
type Listeners struct {
	n       atomic.Int64
	changed func()
}

// NewListeners returns a count that calls changed each time it goes from
// none to some or from some to none. changed runs on the goroutine of the
// call that joined or of the context's end, and must not block (a driver
// posts to its loop, which then reads Listening: calls may come out of
// order, the count does not).
func NewListeners(changed func()) *Listeners { return &Listeners{changed: changed} }

// Join counts one listener until ctx ends.
func (l *Listeners) Join(ctx context.Context) {
	if l.n.Add(1) == 1 {
		l.changed()
	}
	context.AfterFunc(ctx, func() {
		if l.n.Add(-1) == 0 {
			l.changed()
		}
	})
}

// Listening reports whether anyone listens now.
func (l *Listeners) Listening() bool { return l.n.Load() > 0 }
