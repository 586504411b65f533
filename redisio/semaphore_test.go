package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

// TestSemaphoreGrantScope: the semaphore is a primitives.GrantScoper whose
// scope for an announced grant is its slot's, name#slot, while it holds.
func TestSemaphoreGrantScope(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const name = "scoped"
	other := testkit.ClosedAtEnd[semaphore.Service](t)(redisio.NewSemaphore(newClient(t, r), name, 2))
	if _, err := other.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	s := testkit.ClosedAtEnd[semaphore.Service](t)(redisio.NewSemaphore(newClient(t, r), name, 2))
	events := s.Subscribe(ctx)
	g, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g.Slot != 1 || g.Scope() != name+"#1" {
		t.Fatalf("grant in slot %d, scope %s; want slot 1 with slot 0 held", g.Slot, g.Scope())
	}
	var a primitives.Acquired
	for ev := range events {
		if acq, ok := ev.(primitives.Acquired); ok {
			a = acq
			break
		}
	}
	scoper, ok := s.(primitives.GrantScoper)
	if !ok {
		t.Fatal("the semaphore is no primitives.GrantScoper")
	}
	if scope, ok := scoper.GrantScope(a); !ok || scope != g.Scope() {
		t.Fatalf("GrantScope = %q, %v; want %q", scope, ok, g.Scope())
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, ok := scoper.GrantScope(a); ok {
		t.Fatal("GrantScope of a released grant")
	}
}
