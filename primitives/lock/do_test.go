package lock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// The helpers reject a nil Service or fn with an error, never a panic.
func TestHelpersRejectNil(t *testing.T) {
	ctx := context.Background()
	errs := map[string]error{
		"lock.Do":        lock.Do(ctx, nil, func(context.Context, lock.Grant) error { return nil }),
		"rwlock.DoRead":  rwlock.DoRead(ctx, nil, func(context.Context, rwlock.Grant) error { return nil }),
		"rwlock.DoWrite": rwlock.DoWrite(ctx, nil, nil),
		"election.Lead":  election.Lead(ctx, nil, "v", func(context.Context, election.Leadership) error { return nil }),
	}
	for name, err := range errs {
		if !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s with nil: %v, want ErrInvalidArgument", name, err)
		}
	}
}
