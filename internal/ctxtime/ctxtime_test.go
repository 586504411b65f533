package ctxtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Ended answers a context whose deadline has passed with its error even
// before the context's timer has fired, and nil for a live context.
func TestEnded(t *testing.T) {
	if err := Ended(context.Background()); err != nil {
		t.Fatalf("live context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Ended(ctx); err != context.Canceled {
		t.Fatalf("cancelled context: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if err := Ended(ctx); err != context.DeadlineExceeded {
		t.Fatalf("context past its deadline: %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := Ended(ctx); err != nil {
		t.Fatalf("context before its deadline: %v", err)
	}
}

// Alone gives ctx.Err() itself for a failure that wraps it, and any other
// failure as it is.
func TestAlone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	wrapped := fmt.Errorf("list /jobs: %w", context.Canceled)
	other := errors.New("connection lost")
	if err := Alone(ctx, wrapped); err != wrapped {
		t.Fatalf("live context: %v, want the error as it is", err)
	}
	cancel()
	if err := Alone(ctx, wrapped); err != context.Canceled {
		t.Fatalf("ended context, a failure wrapping its error: %v, want context.Canceled itself", err)
	}
	if err := Alone(ctx, other); err != other {
		t.Fatalf("ended context, another failure: %v, want that failure", err)
	}
	if err := Alone(ctx, nil); err != nil {
		t.Fatalf("no failure: %v", err)
	}
	var none context.Context // a nil context has not ended
	if err := Alone(none, wrapped); err != wrapped {
		t.Fatalf("nil context: %v, want the error as it is", err)
	}
}

func TestWithDone(t *testing.T) {
	done := make(chan struct{})
	ctx, cancel := WithDone(context.Background(), done)
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("ended before done closed")
	}
	close(done)
	<-ctx.Done()
	parent, pcancel := context.WithCancel(context.Background())
	ctx2, cancel2 := WithDone(parent, make(chan struct{}))
	defer cancel2()
	pcancel()
	<-ctx2.Done()
}

// Jitter draws afresh at each call, within [d(1-f), d]: redisio's waiters
// (f = 1/2) never look again later than their re-check interval, and a
// thousand of them started together do not look again in the same instant;
// f = 0 is d itself (supervise's backoff without jitter).
func TestJitter(t *testing.T) {
	const d = time.Second
	seen := map[time.Duration]bool{}
	lo, hi := d, time.Duration(0)
	for range 1000 {
		w := Jitter(d, 0.5)
		if w < d/2 || w > d {
			t.Fatalf("Jitter(%v, 0.5) = %v, want within [%v, %v]", d, w, d/2, d)
		}
		seen[w] = true
		lo, hi = min(lo, w), max(hi, w)
	}
	// 1,000 draws over half a second: distinct, and covering most of it.
	if len(seen) < 900 || hi-lo < d/2*9/10 {
		t.Errorf("1000 draws: %d distinct, from %v to %v: want spread over [%v, %v]", len(seen), lo, hi, d/2, d)
	}
	if w := Jitter(d, 0); w != d {
		t.Errorf("Jitter(%v, 0) = %v, want %v", d, w, d)
	}
	if w := Jitter(d, 1); w < 0 || w > d {
		t.Errorf("Jitter(%v, 1) = %v, want within [0, %v]", d, w, d)
	}
}

// A Backoff's waits double from the first up to the cap, and a Wait ends
// early, reporting it, once ctx ends.
func TestBackoff(t *testing.T) {
	b := NewBackoff(time.Millisecond, 3*time.Millisecond)
	for i, want := range []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond} {
		if b.next != want {
			t.Fatalf("wait %d: %v, want %v", i, b.next, want)
		}
		if !b.Wait(context.Background()) {
			t.Fatalf("wait %d ended early on a live context", i)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if NewBackoff(time.Hour, time.Hour).Wait(ctx) {
		t.Fatal("a wait on an ended context reported a whole sleep")
	}
}
