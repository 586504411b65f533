package ctxtime

import (
	"context"
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
