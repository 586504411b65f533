package semaphore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

func TestDoRejectsNil(t *testing.T) {
	ctx := context.Background()
	if err := semaphore.Do(ctx, nil, func(context.Context, semaphore.Grant) error { return nil }); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("Do with nil Service: %v, want ErrInvalidArgument", err)
	}
}

func TestScope(t *testing.T) {
	g := semaphore.Grant{Name: "/jobs", Slot: 3}
	if got := g.Scope(); got != "/jobs#3" {
		t.Errorf("Scope() = %q, want %q", got, "/jobs#3")
	}
}
