package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestServerFailureKeepsHold: in a 3-server ensemble, when the server a
// holder is connected to dies, its session moves to another server within
// the session timeout: the holder is Suspended, then Resumed, never Lost,
// and the hold excludes others throughout; the next hold's token is higher.
func TestServerFailureKeepsHold(t *testing.T) {
	t.Parallel()
	zks := testserver.StartZooKeeperEnsemble(t, 3)
	var servers []string
	for _, z := range zks {
		servers = append(servers, z.Addr)
	}
	const path = "/fault/ensemble"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
	o := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, zkio.WithSessionTimeout(8*time.Second)))
	events := h.Subscribe(ctx)
	g, err := h.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	connected := zkio.ServerOf(s)
	for _, z := range zks {
		if z.Addr == connected {
			z.Stop()
		}
	}
	sus := nextOf[primitives.Suspended](t, events, 20*time.Second)
	e, _ := readHold(t, events, 20*time.Second)
	if _, ok := e.(primitives.Resumed); !ok || sus.Created != g.Created {
		t.Fatalf("after the server died: Suspended %+v then %#v (%v), want Resumed", sus, e, s.Err())
	}
	if _, err := o.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock by another owner after the failover: %v, want ErrLockTaken", err)
	}
	if err := h.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	g2, err := o.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token() <= g.Token() {
		t.Fatalf("token %d after %d", g2.Token(), g.Token())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}

// readHold returns the next Resumed, Released or Lost.
func readHold(t *testing.T, ch <-chan primitives.Event, within time.Duration) (primitives.Event, bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return nil, true
			}
			switch e.(type) {
			case primitives.Resumed, primitives.Released, primitives.Lost:
				return e, false
			}
		case <-deadline:
			t.Fatalf("no Resumed, Released or Lost within %v", within)
		}
	}
}
