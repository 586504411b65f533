package zkio_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestOversizedValue: a Campaign or Proclaim value over what ZooKeeper
// takes (its jute.maxbuffer, 1 MiB by default) fails at once with an error
// wrapping primitives.ErrInvalidArgument that names the limit, leaves no
// znode, and leaves the session's connection alone: a lock held on the same
// session is never Suspended. A value of exactly the limit, on a path of
// the longest length, is taken.
func TestOversizedValue(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	admin := adminConn(t, servers)
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/oversized/lock", zkio.WithSession(s)))
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	// The longest path a primitive takes, so that the limit leaves room for
	// the znode's name.
	path := "/oversized/" + strings.Repeat("e", 1024-len("/oversized/"))
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, path, zkio.WithSession(s)))
	limit := strconv.Itoa(zkio.DefaultMaxDataSize)
	refused := func(what string, f func(context.Context) error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), limit) ||
			time.Since(start) > time.Second || len(err.Error()) > 300 {
			t.Fatalf("%s: %.300v after %v, want at once an ErrInvalidArgument naming the limit %s", what, err, time.Since(start), limit)
		}
		children, _, err := admin.Children(path)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		if leader, _ := e.Leader(ctx); len(children) > 1 || (len(children) == 1 && leader.Value != "small") {
			t.Fatalf("%s left %v in %s", what, children, path)
		}
	}
	for _, n := range []int{zkio.DefaultMaxDataSize + 1, 1200 << 10, 2 << 20} {
		big := strings.Repeat("x", n)
		refused("Campaign of "+strconv.Itoa(n)+" bytes", func(ctx context.Context) error { return e.Campaign(ctx, big) })
	}
	if err := e.Campaign(ctx, "small"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{zkio.DefaultMaxDataSize + 1, 1200 << 10} {
		big := strings.Repeat("x", n)
		refused("Proclaim of "+strconv.Itoa(n)+" bytes", func(ctx context.Context) error { return e.Proclaim(ctx, big) })
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "small" {
		t.Fatalf("Leader after refused Proclaims: %.40v, %v", ld.Value, err)
	}
	atLimit := strings.Repeat("y", zkio.DefaultMaxDataSize)
	if err := e.Proclaim(ctx, atLimit); err != nil {
		t.Fatalf("Proclaim of the limit: %v", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Campaign(ctx, atLimit); err != nil {
		t.Fatalf("Campaign of the limit: %v", err)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != atLimit {
		t.Fatalf("Leader after a Campaign of the limit: %d bytes, %v", len(ld.Value), err)
	}
	// The lock on the same session held throughout: its connection never
	// dropped. A round trip after the refusals sees no Suspended before it.
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for acquired := 0; acquired < 2; {
		select {
		case ev := <-events:
			switch ev.(type) {
			case primitives.Acquired:
				acquired++
			case primitives.Suspended, primitives.Lost:
				t.Fatalf("the lock on the session got %T", ev)
			}
		case <-ctx.Done():
			t.Fatal("events stopped")
		}
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// TestWithMaxDataSize: WithMaxDataSize sets the limit of a session's
// values, and its errors name it; a limit out of range, or given with
// WithSession, is refused.
func TestWithMaxDataSize(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second), zkio.WithMaxDataSize(100))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, "/maxdata/e", zkio.WithSession(s)))
	if err := e.Campaign(ctx, strings.Repeat("x", 101)); !errors.Is(err, zkio.ErrInvalidArgument) || !strings.Contains(err.Error(), "100 bytes") {
		t.Fatalf("Campaign of 101 bytes with a limit of 100: %v", err)
	}
	if err := e.Campaign(ctx, strings.Repeat("x", 100)); err != nil {
		t.Fatalf("Campaign of the limit: %v", err)
	}
	if err := e.Proclaim(ctx, strings.Repeat("x", 101)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Proclaim of 101 bytes with a limit of 100: %v", err)
	}
	own := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(servers, "/maxdata/own", zkio.WithSessionTimeout(5*time.Second), zkio.WithMaxDataSize(10)))
	if err := own.Campaign(ctx, strings.Repeat("x", 11)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Campaign of 11 bytes on its own session with a limit of 10: %v", err)
	}
	for _, opts := range [][]zkio.Option{
		{zkio.WithMaxDataSize(0)},
		{zkio.WithMaxDataSize(-1)},
		{zkio.WithMaxDataSize(1 << 40)},
	} {
		if _, err := zkio.NewSession(servers, opts...); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewSession with a bad limit: %v", err)
		}
	}
	if _, err := zkio.NewElection(nil, "/maxdata/x", zkio.WithSession(s), zkio.WithMaxDataSize(10)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("WithMaxDataSize with WithSession: %v", err)
	}
}
