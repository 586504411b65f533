package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestSharedSession: services on one session are distinct owners; Close
// of one releases and withdraws what it has before it returns, and keeps
// the session; closing the session ends the others with ErrClosed.
func TestSharedSession(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const path = "/shared/lock"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
	w := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
	c := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
	if _, err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock by another service of the same session: %v, want ErrLockTaken", err)
	}
	waiting := make(chan error, 1)
	go func() { _, err := w.Lock(ctx); waiting <- err }()
	queued(t, servers, path, 2)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("waiting Lock of a closed service: %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := c.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock right after the holder and the waiter closed: %v", err)
	}
	if s.Err() != nil {
		t.Fatalf("closing services ended the session: %v", s.Err())
	}
	events := c.Subscribe(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var released bool
	for e := range events {
		if r, ok := e.(primitives.Released); ok && r.Created == g.Created {
			released = true
		}
	}
	if !released || !errors.Is(c.Err(), primitives.ErrClosed) {
		t.Fatalf("after the session closed: Released %v, Err %v", released, c.Err())
	}
}
