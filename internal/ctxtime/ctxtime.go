// Package ctxtime has the timing helpers disco's packages share.
package ctxtime

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Jitter returns a random duration between d less the fraction f of it and
// d, drawn afresh at each call; f is from 0 (d itself) to 1. Waits drawn
// this way by many goroutines, or processes, started together do not all
// end in the same instant, and none ends later than d.
func Jitter(d time.Duration, f float64) time.Duration {
	return d - time.Duration(f*rand.Float64()*float64(d))
}

// Sleep waits for d or until ctx ends, and reports whether it waited the
// whole d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Backoff is the growing wait between the tries of a request repeated
// until it succeeds: each Wait sleeps the current delay, which then doubles
// up to a cap. Not safe for concurrent use.
type Backoff struct{ next, max time.Duration }

// NewBackoff returns a Backoff whose first wait is first and whose waits
// grow no longer than max.
func NewBackoff(first, max time.Duration) *Backoff { return &Backoff{next: first, max: max} }

// Wait sleeps the current delay or until ctx ends, reports whether it slept
// the whole delay, and doubles the next one, up to the cap.
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.next
	b.next = min(2*b.next, b.max)
	return Sleep(ctx, d)
}

// Ended returns ctx's error if ctx has ended or its deadline has passed
// (its timer may not have fired yet), and nil otherwise. A call whose
// request failed answers Ended's error, when there is one, in place of the
// request's: a server's timeout or a cancelled stream can come back a
// moment before the caller's context reports its own end. A nil ctx has
// not ended: the request's own error (a refusal of the nil ctx) stands.
func Ended(ctx context.Context) error {
	if ctx == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done() // due now
		return ctx.Err()
	}
	return nil
}

// Alone returns ctx's error itself (see Ended) when err, a call's failure,
// wraps it: the call gave up because its context ended, and the
// primitives promise ctx.Err() then, so that err == ctx.Err() holds. Any
// other err, and nil, is returned as is.
func Alone(ctx context.Context, err error) error {
	if cerr := EndedBy(ctx, err); cerr != nil {
		return cerr
	}
	return err
}

// EndedBy returns ctx's error itself (see Ended) if err wraps it: the
// call that failed with err gave up because ctx ended. Otherwise nil.
func EndedBy(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cerr := Ended(ctx); cerr != nil && errors.Is(err, cerr) {
		return cerr
	}
	return nil
}

// WithDone returns a context that ends when ctx does or done is closed,
// whichever is first; cancel releases it and must be called.
func WithDone(ctx context.Context, done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
