package zkio_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
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
			if err != nil && !errors.Is(err, zk.ErrNoNode) { // the last party out clears the barrier
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

// TestUnlockWhoseDeleteFailsKeepsTheGrant: an Unlock whose delete fails
// with the connection tries it again until its ctx ends, then fails with
// the grant still held and its znode in place; a later Unlock releases it.
func TestUnlockWhoseDeleteFailsKeepsTheGrant(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	failed, heal := zkio.FailDeletes(s)
	defer heal()
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/test/unlock-fails/lock", zkio.WithSession(s)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := l.Unlock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock while every delete fails: %v, want the ctx's deadline", err)
	}
	if failed() < 2 {
		t.Fatalf("the release's delete failed %d times, want it tried again", failed())
	}
	if cur, ok := l.(primitives.GrantHolder).CurrentGrant(); !ok || cur.Created != g.Created {
		t.Fatalf("after the failed Unlock: Current %+v, %v; want the grant still held", cur, ok)
	}
	if ok, _, err := adminConn(t, servers).Exists(g.Key); err != nil || !ok {
		t.Fatalf("the grant's znode after the failed Unlock: exists %v, %v", ok, err)
	}
	heal()
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock once deletes go through: %v", err)
	}
	if ok, _, err := adminConn(t, servers).Exists(g.Key); err != nil || ok {
		t.Fatalf("the grant's znode after Unlock: exists %v, %v", ok, err)
	}
}

// TestFailedUnlockStillWatched: a grant whose Unlock failed while it was
// young (its znode not yet watched) is watched once the release failed:
// its znode deleted later by someone else ends it (Released, since the
// failed delete may have landed). Before, the watch was never set, and
// the grant stood for good after its znode was gone.
func TestFailedUnlockStillWatched(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	_, heal := zkio.FailDeletes(s)
	defer heal()
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/test/unlock-fails/watched", zkio.WithSession(s)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Past driver.HoldWatchAfter, while the release is under way.
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if err := l.Unlock(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock while every delete fails: %v, want the ctx's deadline", err)
	}
	heal()
	if err := adminConn(t, servers).Delete(g.Key, -1); err != nil {
		t.Fatal(err)
	}
	ended := make(chan primitives.Event, 1)
	go func() {
		for e := range events {
			switch e := e.(type) {
			case primitives.Released:
				if e.Created == g.Created {
					ended <- e
				}
			case primitives.Lost:
				if e.Created == g.Created {
					ended <- e
				}
			}
		}
	}()
	select {
	case e := <-ended:
		if _, ok := e.(primitives.Released); !ok {
			t.Fatalf("the grant whose release failed ended with %T, want Released", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the grant's znode deleted by another client 10s ago, the grant still stands: %+v", g)
	}
}
