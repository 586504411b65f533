package store

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/fencing"
)

// TestSupersededWriteNotApplied: a call whose admitted context was cancelled
// by a higher token must not write.
func TestSupersededWriteNotApplied(t *testing.T) {
	s := New()
	ctx := fencing.NewOutgoingContext(context.Background(), 3)
	if _, err := s.Write(ctx, &pb.WriteRequest{Key: "k", Value: "first"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	cancel(fmt.Errorf("token 5 arrived: %w", fencing.ErrTokenStale))
	_, err := s.Write(ctx, &pb.WriteRequest{Key: "k", Value: "second"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("superseded Write: %v, want FailedPrecondition", err)
	}
	if r, _ := s.Get(context.Background(), &pb.GetRequest{Key: "k"}); r.Value != "first" {
		t.Fatalf("value %q, want first", r.Value)
	}
}
