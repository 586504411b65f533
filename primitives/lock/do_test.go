package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
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

// The helpers and the supervisors reject a nil context with an error, never
// a panic, before they touch the service or build one.
func TestHelpersRejectNilContext(t *testing.T) {
	var noContext context.Context
	newLock := func(context.Context) (lock.Service, error) {
		t.Error("lock.Supervise with a nil context built a service")
		return nil, errors.New("unexpected")
	}
	newElection := func(context.Context) (election.Service, error) {
		t.Error("election.Supervise with a nil context built a service")
		return nil, errors.New("unexpected")
	}
	errs := map[string]error{
		"lock.Do":            lock.Do(noContext, (*nilLock)(nil), func(context.Context, lock.Grant) error { return nil }),
		"rwlock.DoRead":      rwlock.DoRead(noContext, (*nilRWLock)(nil), func(context.Context, rwlock.Grant) error { return nil }),
		"rwlock.DoWrite":     rwlock.DoWrite(noContext, (*nilRWLock)(nil), func(context.Context, rwlock.Grant) error { return nil }),
		"election.Lead":      election.Lead(noContext, (*nilElection)(nil), "v", func(context.Context, election.Leadership) error { return nil }),
		"semaphore.Do":       semaphore.Do(noContext, (*nilSemaphore)(nil), func(context.Context, semaphore.Grant) error { return nil }),
		"lock.Supervise":     lock.Supervise(noContext, newLock, func(context.Context, lock.Grant) error { return nil }),
		"election.Supervise": election.Supervise(noContext, newElection, "v", func(context.Context, election.Leadership) error { return nil }),
	}
	for name, err := range errs {
		if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s with a nil context: %v, want an error saying nil context, wrapping ErrInvalidArgument", name, err)
		}
	}
}

// Services that are nil pointers: non-nil interfaces whose every method
// would panic.
type (
	nilLock      struct{ lock.Service }
	nilRWLock    struct{ rwlock.Service }
	nilElection  struct{ election.Service }
	nilSemaphore struct{ semaphore.Service }
)

// A Service that is a nil pointer (a constructor's typed nil) is rejected
// as a nil one is, with an error, never a panic.
func TestHelpersRejectNilPointerService(t *testing.T) {
	ctx := context.Background()
	errs := map[string]error{
		"lock.Do":        lock.Do(ctx, (*nilLock)(nil), func(context.Context, lock.Grant) error { return nil }),
		"rwlock.DoRead":  rwlock.DoRead(ctx, (*nilRWLock)(nil), func(context.Context, rwlock.Grant) error { return nil }),
		"rwlock.DoWrite": rwlock.DoWrite(ctx, (*nilRWLock)(nil), func(context.Context, rwlock.Grant) error { return nil }),
		"election.Lead":  election.Lead(ctx, (*nilElection)(nil), "v", func(context.Context, election.Leadership) error { return nil }),
		"semaphore.Do":   semaphore.Do(ctx, (*nilSemaphore)(nil), func(context.Context, semaphore.Grant) error { return nil }),
	}
	for name, err := range errs {
		if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil Service") {
			t.Errorf("%s with a nil pointer as its Service: %v, want an error saying nil Service, wrapping ErrInvalidArgument", name, err)
		}
	}
}
