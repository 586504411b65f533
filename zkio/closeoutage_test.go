package zkio_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestCloseInOutage: Close of a session, or of a lock holder, a lock
// waiter or a double barrier party on its own session, while ZooKeeper
// does not answer returns within the session timeout, with an error wrapping context.DeadlineExceeded (its znodes
// stay until ZooKeeper expires the session), and leaves no goroutine of
// the session or of its ZooKeeper client behind, though the connection
// stays open. Before, the client's goroutines ran on after Session.Close
// until a read timed out, two thirds of the session timeout later; and
// Close returned nil.
func TestCloseInOutage(t *testing.T) {
	servers := startZooKeeper(t)
	const timeout = 6 * time.Second
	// The waiter's holder, whose goroutines (its watch too) are there
	// before and after.
	hs := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/outage/close-waiter", zkio.WithSession(hs)))
	if _, err := h.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the holder's watch", func() bool { return zkio.Watchers(hs) > 0 })
	admin := adminConn(t, servers)
	if _, _, err := admin.Exists("/"); err != nil { // connected: its goroutines run
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		open func(t *testing.T, ctx context.Context, via string) io.Closer
	}{
		{"session", func(t *testing.T, ctx context.Context, via string) io.Closer {
			s, err := zkio.NewSession([]string{via}, zkio.WithSessionTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"lock holder", func(t *testing.T, ctx context.Context, via string) io.Closer {
			l, err := zkio.NewLock([]string{via}, "/outage/close", zkio.WithSessionTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"lock waiter", func(t *testing.T, ctx context.Context, via string) io.Closer {
			l, err := zkio.NewLock([]string{via}, "/outage/close-waiter", zkio.WithSessionTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = l.Lock(ctx) }()
			testkit.Eventually(t, 20*time.Second, "the waiter queued", func() bool {
				kids, _, err := admin.Children("/outage/close-waiter")
				return err == nil && len(kids) == 2
			})
			return l
		}},
		{"double barrier party", func(t *testing.T, ctx context.Context, via string) io.Closer {
			d, err := zkio.NewDoubleBarrier([]string{via}, "/outage/close-double", 1, zkio.WithSessionTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Enter(ctx); err != nil {
				t.Fatal(err)
			}
			return d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := goleak.IgnoreCurrent() // the shared server's, started
			p, via := newPartition(t, servers[0])
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := tc.open(t, ctx, via)
			p.cut()
			began := time.Now()
			err := c.Close()
			if took := time.Since(began); took > timeout {
				t.Fatalf("Close took %v in an outage, more than the session timeout %v", took, timeout)
			}
			// Nothing was deleted: ZooKeeper ends the session, and its
			// znodes, at its timeout.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Close in an outage = %v, want an error wrapping context.DeadlineExceeded", err)
			}
			// While the partition still holds the connection open.
			if err := goleak.Find(before,
				goleak.IgnoreAnyFunction("github.com/ahrtr/disco/internal/faultproxy.(*Proxy).pump"),
				goleak.IgnoreAnyFunction("github.com/ahrtr/disco/internal/faultproxy.(*Proxy).accept")); err != nil {
				t.Fatalf("goroutines outlived Close: %v", err)
			}
		})
	}
}
