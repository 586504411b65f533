// Package ctxtime has the timing helpers disco's packages share.
package ctxtime

import (
	"context"
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

// Ended returns ctx's error if ctx has ended or its deadline has passed
// (its timer may not have fired yet), and nil otherwise. A call whose
// request failed answers Ended's error, when there is one, in place of the
// request's: a server's timeout or a cancelled stream can come back a
// moment before the caller's context reports its own end.
func Ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		<-ctx.Done() // due now
		return ctx.Err()
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
