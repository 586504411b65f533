package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

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
	sus := testkit.NextOf[primitives.Suspended](t, events, 20*time.Second)
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

// TestExpiredSessionNotResumed: when the server a session reaches answers
// that the session is expired, the holder is Suspended (its connection
// broke first) and then Lost, never Resumed: that answer confirms no
// session, and the hold's znode is gone with it. The Lost, and the
// Session's SessionID and LeaseID, still name the session (the client
// forgets its id at the expiry). Here the server is a
// second one, not of the first's ensemble, that never knew the session
// (on an ensemble: any member after the session was expired or killed
// there); it has seen more transactions than the client has, or it would
// refuse the client (which never goes back in time) rather than answer.
func TestExpiredSessionNotResumed(t *testing.T) {
	t.Parallel()
	a, b := testserver.StartZooKeeper(t), testserver.StartZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	// A timeout long enough that the session's own deadline does not pass
	// before the client reaches the other server.
	s, err := zkio.NewSession([]string{a.Addr, b.Addr}, zkio.WithSessionTimeout(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/fault/expired", zkio.WithSession(s)))
	events := h.Subscribe(ctx)
	g, err := h.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := s.SessionID()
	connected, other := a, b
	if zkio.ServerOf(s) == b.Addr {
		connected, other = b, a
	}
	// Every zxid the client has seen is below the next write's there.
	seen := czxid(t, adminConn(t, []string{connected.Addr}), "/fault/expired-mark")
	mark := adminConn(t, []string{other.Addr})
	for czxid(t, mark, "/fault/expired-mark") <= seen {
	}
	connected.Stop()
	sus := testkit.NextOf[primitives.Suspended](t, events, 20*time.Second)
	e, _ := readHold(t, events, 20*time.Second)
	lost, ok := e.(primitives.Lost)
	if !ok || sus.Created != g.Created || lost.Created != g.Created || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("after reaching a server that does not know the session: Suspended %+v then %#v (%v), want Lost", sus, e, s.Err())
	}
	if !errors.Is(s.Err(), primitives.ErrLost) {
		t.Fatalf("session's Err %v, want ErrLost", s.Err())
	}
	if name := fmt.Sprintf("session %#x ", id); !strings.Contains(lost.Err.Error(), name) || s.SessionID() != id || s.LeaseID() != id {
		t.Fatalf("Lost %q, SessionID %#x, LeaseID %#x after the expiry; want them to name the %s", lost.Err, s.SessionID(), s.LeaseID(), name)
	}
}

// czxid creates path (and its parent) anew on conn, and returns the zxid
// of its creation.
func czxid(t *testing.T, conn *zk.Conn, path string) int64 {
	t.Helper()
	parent := path[:strings.LastIndex(path, "/")]
	if _, err := conn.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if err := conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	_, st, err := conn.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Czxid
}
