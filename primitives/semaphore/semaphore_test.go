package semaphore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ahrtr/disco/memio"
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

// Close while Do's fn runs ends fn's context and Do returns an error
// wrapping primitives.ErrClosed.
func TestDoEndsWithErrClosedAtClose(t *testing.T) {
	s, err := memio.NewSemaphore(memio.NewStore(), "/s", 2)
	if err != nil {
		t.Fatal(err)
	}
	err = semaphore.Do(context.Background(), s, func(ctx context.Context, _ semaphore.Grant) error {
		go s.Close()
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Do = %v, want an error wrapping ErrClosed", err)
	}
}
