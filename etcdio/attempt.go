package etcdio

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Every request a session makes on its own behalf (a key's write, a look,
// a delete, a lease check) is made in attempts, each bounded, so that a
// member that stopped answering is given up for another of the client's
// members. The bound follows the store: it starts at requestTimeout,
// doubles (up to maxRequestTimeout) whenever an attempt runs out of it, and
// after an attempt that succeeds it is twice that attempt's time, and at
// least requestTimeout. A store that answers, however slowly, is therefore
// waited for rather than given up on and asked again forever.

// maxRequestTimeout caps the bound of one attempt.
const maxRequestTimeout = 4 * requestTimeout

// attemptBound is the bound of a session's next attempt. Safe for
// concurrent use.
type attemptBound struct{ d atomic.Int64 }

// get returns the current bound.
func (b *attemptBound) get() time.Duration {
	if d := time.Duration(b.d.Load()); d > 0 {
		return d
	}
	return requestTimeout
}

// ranOut records that an attempt bounded by d ran out of it.
func (b *attemptBound) ranOut(d time.Duration) {
	next := min(2*d, maxRequestTimeout)
	for {
		cur := b.d.Load()
		if time.Duration(cur) >= next || b.d.CompareAndSwap(cur, int64(next)) {
			return
		}
	}
}

// answered records an attempt that succeeded after took.
func (b *attemptBound) answered(took time.Duration) {
	b.d.Store(int64(min(max(2*took, requestTimeout), maxRequestTimeout)))
}

// attempt returns the context of one attempt under parent, bounded by the
// session's current bound, and the function to call with the attempt's
// error once it is over (it also releases the context).
func (s *Session) attempt(parent context.Context) (context.Context, func(error)) {
	d, start := s.bound.get(), time.Now()
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, func(err error) {
		switch {
		case err == nil:
			s.bound.answered(time.Since(start))
		case parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
			s.bound.ranOut(d)
		}
		cancel()
	}
}
