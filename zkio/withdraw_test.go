package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/zkio"
)

// TestGaveUpWaiterLeavesNothing: a Lock whose context ends while it waits
// has deleted its znode by the time it returns, with ZooKeeper answering:
// right after, the lock's directory holds the holder's znode alone. (In an
// outage the delete goes on after Lock returned: see
// TestWaiterGivesUpInOutage.)
func TestGaveUpWaiterLeavesNothing(t *testing.T) {
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	const path = "/gaveup/lock"
	holder, err := zkio.NewLock(servers, path)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx := context.Background()
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := zkio.NewSession(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for round := range 10 {
		w, err := zkio.NewLock(nil, path, zkio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = w.Lock(wctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("round %d: Lock: %v, want DeadlineExceeded", round, err)
		}
		kids, _, err := admin.Children(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) != 1 {
			t.Fatalf("round %d: right after the waiter's Lock gave up, %s holds %v, want the holder's znode alone", round, path, kids)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
