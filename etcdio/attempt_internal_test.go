package etcdio

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The bound of an attempt doubles each time an attempt runs out of it, up
// to its cap, and after an answer it is twice the answer's time, at least
// the first bound: a slow store is waited for, a fast one given up on soon.
func TestAttemptBoundFollowsTheStore(t *testing.T) {
	var b attemptBound
	if got := b.get(); got != requestTimeout {
		t.Fatalf("first bound %v, want %v", got, requestTimeout)
	}
	b.ranOut(b.get())
	if got := b.get(); got != 2*requestTimeout {
		t.Fatalf("after one timeout %v, want %v", got, 2*requestTimeout)
	}
	b.ranOut(requestTimeout) // a late report of an older, shorter bound
	if got := b.get(); got != 2*requestTimeout {
		t.Fatalf("an older attempt's timeout lowered the bound to %v", got)
	}
	for range 10 {
		b.ranOut(b.get())
	}
	if got := b.get(); got != maxRequestTimeout {
		t.Fatalf("after many timeouts %v, want the cap %v", got, maxRequestTimeout)
	}
	b.answered(3 * time.Second)
	if got := b.get(); got != 6*time.Second {
		t.Fatalf("after an answer in 3s %v, want 6s", got)
	}
	b.answered(5 * time.Millisecond)
	if got := b.get(); got != requestTimeout {
		t.Fatalf("after an answer in 5ms %v, want %v", got, requestTimeout)
	}
}

// Only an attempt that ran out of its own bound raises it: an attempt ended
// by its caller (cancelled, or at the caller's earlier deadline) or failing
// at once says nothing of the store's speed.
func TestAttemptCountsOnlyItsOwnTimeout(t *testing.T) {
	s := &Session{}
	parent, cancel := context.WithCancel(context.Background())
	ctx, done := s.attempt(parent)
	cancel()
	<-ctx.Done()
	done(ctx.Err())
	_, done = s.attempt(context.Background())
	done(errors.New("connection refused"))
	short, cancelShort := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelShort()
	ctx, done = s.attempt(short)
	<-ctx.Done()
	done(ctx.Err())
	if got := s.bound.get(); got != requestTimeout {
		t.Fatalf("bound %v after attempts ended by their callers or failing, want %v", got, requestTimeout)
	}

	s.bound.d.Store(int64(10 * time.Millisecond))
	ctx, done = s.attempt(context.Background())
	<-ctx.Done()
	done(ctx.Err())
	if got := s.bound.get(); got != 20*time.Millisecond {
		t.Fatalf("bound %v after an attempt ran out of 10ms, want 20ms", got)
	}
}

// A request etcd itself gave up on (its own request timeout, a leader
// change, no leader: Unavailable, as the client returns them) is tried
// again, as is one the connection or the attempt's bound ended; a refusal
// that another attempt would meet again is not.
func TestRetriable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{rpctypes.ErrTimeout, true},
		{rpctypes.ErrTimeoutDueToLeaderFail, true},
		{rpctypes.ErrTimeoutDueToConnectionLost, true},
		{rpctypes.ErrLeaderChanged, true},
		{rpctypes.ErrNoLeader, true},
		{rpctypes.ErrTooManyRequests, true},
		{fmt.Errorf("txn: %w", rpctypes.ErrTooManyRequests), true},
		{fmt.Errorf("txn: %w", rpctypes.ErrTimeout), true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{context.DeadlineExceeded, true},
		{rpctypes.ErrCompacted, false},
		{rpctypes.ErrLeaseNotFound, false},
		{rpctypes.ErrNoSpace, false},
		{errors.New("other"), false},
	} {
		if got := retriable(c.err); got != c.want {
			t.Errorf("retriable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
