package zkio_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/zkio"
)

// TestCloseDeletesBeforeReturning: Close of a lock holder, or of a double
// barrier's party that entered, on a shared session deletes its znode
// before it returns, trying the delete again while it fails with the
// connection, so that others need not wait for the session, which lives
// on. Before, Close tried once, handed the znode to a helper and returned
// with it still there.
func TestCloseDeletesBeforeReturning(t *testing.T) {
	servers := startZooKeeper(t)
	for _, tc := range []struct {
		name string
		// take makes a primitive on s whose znode is under path once take
		// has returned.
		take func(t *testing.T, ctx context.Context, s *zkio.Session, path string) io.Closer
	}{
		{"lock", func(t *testing.T, ctx context.Context, s *zkio.Session, path string) io.Closer {
			l, err := zkio.NewLock(nil, path, zkio.WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"double barrier", func(t *testing.T, ctx context.Context, s *zkio.Session, path string) io.Closer {
			d, err := zkio.NewDoubleBarrier(nil, path, 1, zkio.WithSession(s))
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
			s, err := zkio.NewSession(servers)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			failed, heal := zkio.FailDeletes(s)
			defer heal()
			path := "/test/close-deletes/" + tc.name
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p := tc.take(t, ctx, s, path)
			closed := make(chan error, 1)
			go func() { closed <- p.Close() }()
			testkit.Eventually(t, 10*time.Second, "Close's delete tried again", func() bool { return failed() >= 2 })
			select {
			case err := <-closed:
				t.Fatalf("Close returned (%v) while the delete of its znode failed", err)
			default:
			}
			heal()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-ctx.Done():
				t.Fatal("Close did not return once its delete could go through")
			}
			children, _, err := adminConn(t, servers).Children(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range children {
				if c != "ready" { // the barrier's, not the party's
					t.Fatalf("znode %s/%s left once Close returned", path, c)
				}
			}
		})
	}
}
