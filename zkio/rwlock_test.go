package zkio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/zkio"
)

// The epoch znode is the one thing a read/write lock leaves behind;
// RetireRWLock removes it, and refuses while anyone holds or waits.
func TestRetireRWLock(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const path = "/rwlock/retire"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := zkio.NewRWLock(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admin := adminConn(t, servers)
	epochExists := func() bool {
		t.Helper()
		ok, _, err := admin.Exists(path + zkio.EpochSuffix)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	g, err := l.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g.Mode != rwlock.Read || !epochExists() {
		t.Fatalf("read grant %+v; epoch znode exists: %v", g, epochExists())
	}
	if err := zkio.RetireRWLock(ctx, s, path); !errors.Is(err, zkio.ErrInUse) {
		t.Fatalf("retire while a reader holds: %v, want ErrInUse", err)
	}
	if !epochExists() {
		t.Fatal("a refused retire deleted the epoch")
	}
	if err := l.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := zkio.RetireRWLock(ctx, s, path); err != nil {
		t.Fatal(err)
	}
	if epochExists() {
		t.Fatal("the epoch znode outlived RetireRWLock")
	}
	// A writer after the retire gets a token above the reader's: the new
	// epoch znode's zxid.
	w, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w.FencingToken <= g.FencingToken {
		t.Fatalf("writer's token %d after the retire, reader's before %d", w.FencingToken, g.FencingToken)
	}
	for _, bad := range []struct {
		s    *zkio.Session
		path string
	}{{nil, path}, {s, ""}, {s, "/"}, {s, "relative"}, {s, "/" + strings.Repeat("x", 5000)}} {
		err := zkio.RetireRWLock(ctx, bad.s, bad.path)
		if !errors.Is(err, zkio.ErrInvalidArgument) || len(err.Error()) > 200 {
			t.Errorf("RetireRWLock(%v, %.20q): %v, want a short ErrInvalidArgument", bad.s != nil, bad.path, err)
		}
	}
}

// RetireRWLock on a session that was closed (or lost) fails with the
// session's error, wrapping primitives.ErrClosed (ErrLost), not the
// client's bare "connection closed".
func TestRetireRWLockOnEndedSession(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zkio.RetireRWLock(context.Background(), s, "/rwlock/retire-closed"); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("RetireRWLock on a closed session: %v, want ErrClosed", err)
	}
}

// RetireRWLock refuses a nil context as bad input, and never panics.
func TestRetireRWLockRefusesNilContext(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var noContext context.Context
	if err := zkio.RetireRWLock(noContext, s, "/rwlock/retire-nil"); !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
		t.Fatalf("RetireRWLock with a nil context: %v, want an error saying nil context, wrapping ErrInvalidArgument", err)
	}
}
