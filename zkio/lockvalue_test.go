package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// lockData returns the data of the lock znodes under p, in queue order.
func lockData(t *testing.T, admin *zk.Conn, p string) []string {
	t.Helper()
	children, _, err := admin.Children(p)
	if err != nil {
		t.Fatal(err)
	}
	seq := func(c string) string { return c[strings.LastIndex(c, "lock-")+len("lock-"):] }
	sort.Slice(children, func(i, j int) bool { return seq(children[i]) < seq(children[j]) })
	var out []string
	for _, c := range children {
		data, _, err := admin.Get(path.Join(p, c))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(data))
	}
	return out
}

// A lock made WithValue writes the value as its holder's and its waiters'
// znode data.
func TestLockValue(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	const p = "/values/lock"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, p, zkio.WithValue("host-a:101")))
	b := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, p, zkio.WithValue("host-b:202")))
	g, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := b.Lock(ctx); got <- err }()
	queued(t, servers, p, 2)
	if data := lockData(t, admin, p); strings.Join(data, ",") != "host-a:101,host-b:202" {
		t.Fatalf("lock znodes' data %q, want the holder's then the waiter's value", data)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Curator's InterProcessMutex ignores a lock znode's data: a disco lock
// with a value and a Curator mutex exclude each other both ways.
func TestInteropCuratorMutexValue(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	cp := curatorClasspath(t)
	const p = "/interop/mutex-value"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, p, zkio.WithValue("host-a:101")))
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur := startPeer(t, cp, "mutex", servers[0], p)
	cur.expect(t, "WAITING")
	queued(t, servers, p, 2)
	cur.quiet(t, "while disco holds the lock")
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	cur.expect(t, "ACQUIRED")
	if _, err := l.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock while Curator holds: %v, want ErrLockTaken", err)
	}
	cur.send(t, "release")
	cur.expect(t, "RELEASED")
}

// refusedRuns numbers TestLockValueRefused's runs in this process.
var refusedRuns atomic.Int64

// A value over the session's limit, or WithValue on another constructor
// than NewLock, is refused with an error wrapping
// primitives.ErrInvalidArgument before anything is written.
func TestLockValueRefused(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	// A path of this run's own: the tests share one server, and a run
	// before this one in the same process (-count) leaves its lock's
	// parent znode.
	p := fmt.Sprintf("/values/refused-%d", refusedRuns.Add(1))
	s, err := zkio.NewSession(servers, zkio.WithMaxDataSize(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := map[string]func() error{
		"over WithMaxDataSize": func() error {
			_, err := zkio.NewLock(servers, p, zkio.WithValue("12345678901"), zkio.WithMaxDataSize(10))
			return err
		},
		"over the session's limit": func() error {
			_, err := zkio.NewLock(nil, p, zkio.WithValue("12345678901"), zkio.WithSession(s))
			return err
		},
		"over DefaultMaxDataSize": func() error {
			_, err := zkio.NewLock(servers, p, zkio.WithValue(strings.Repeat("x", zkio.DefaultMaxDataSize+1)))
			return err
		},
		"election": func() error { _, err := zkio.NewElection(servers, p, zkio.WithValue("v")); return err },
		"rwlock":   func() error { _, err := zkio.NewRWLock(servers, p, zkio.WithValue("v")); return err },
		"session":  func() error { _, err := zkio.NewSession(servers, zkio.WithValue("v")); return err },
	}
	for name, c := range cases {
		err := c()
		if !errors.Is(err, primitives.ErrInvalidArgument) || !errors.Is(err, zkio.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping primitives.ErrInvalidArgument", name, err)
		}
		t.Logf("%s: %.200v", name, err)
	}
	if _, _, err := admin.Children(p); !errors.Is(err, zk.ErrNoNode) {
		t.Fatalf("refused constructors left %s behind (%v)", p, err)
	}
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, p, zkio.WithValue("1234567890"), zkio.WithSession(s)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatalf("a value at the limit: %v", err)
	}
}
