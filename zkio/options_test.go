package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestBadInput: bad constructor input is a clear error wrapping
// ErrInvalidArgument, never a panic, and leaves nothing in ZooKeeper.
func TestBadInput(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	long := "/" + strings.Repeat("x", 2000)
	cases := []struct {
		name    string
		servers []string
		path    string
		opts    []zkio.Option
	}{
		{"no servers", nil, "/ok", nil},
		{"empty server", []string{""}, "/ok", nil},
		{"empty path", servers, "", nil},
		{"root path", servers, "/", nil},
		{"relative path", servers, "a/b", nil},
		{"empty segment", servers, "/a//b", nil},
		{"dot segment", servers, "/a/../b", nil},
		{"long path", servers, long, nil},
		{"nil option", servers, "/ok", []zkio.Option{nil}},
		{"nil session", nil, "/ok", []zkio.Option{zkio.WithSession(nil)}},
		{"short timeout", servers, "/ok", []zkio.Option{zkio.WithSessionTimeout(time.Millisecond)}},
		{"servers and session", servers, "/ok", []zkio.Option{zkio.WithSession(s)}},
		{"timeout and session", nil, "/ok", []zkio.Option{zkio.WithSession(s), zkio.WithSessionTimeout(time.Second)}},
		{"short TTL", servers, "/ok", []zkio.Option{zkio.WithTTL(500 * time.Millisecond)}},
		{"TTL not in milliseconds", servers, "/ok", []zkio.Option{zkio.WithTTL(time.Second + time.Microsecond)}},
		{"TTL and session", nil, "/ok", []zkio.Option{zkio.WithSession(s), zkio.WithTTL(5 * time.Second)}},
		{"suspend after nothing", servers, "/ok", []zkio.Option{zkio.WithSuspendAfter(0)}},
		{"suspend after the whole TTL", servers, "/ok", []zkio.Option{zkio.WithSuspendAfter(1)}},
		{"suspend after and session", nil, "/ok", []zkio.Option{zkio.WithSession(s), zkio.WithSuspendAfter(0.3)}},
		// Paths ZooKeeper refuses.
		{"control character", servers, "/a/b\x01c", nil},
		{"invalid UTF-8", servers, "/a/\xff", nil},
		{"reserved rune", servers, "/a/\ufff5", nil},
		{"ZooKeeper's own", servers, "/zookeeper", nil},
		{"below ZooKeeper's own", servers, "/zookeeper/quota/x", nil},
		// Names disco's own znodes take.
		{"an epoch znode", servers, "/ok.epoch", nil},
		{"below an epoch znode", servers, "/a/ok.epoch/b", nil},
		{"a lock's znode", servers, "/a/_c_0f-lock-0000000001", nil},
		{"below a latch's znode", servers, "/a/x-latch-0000000002/b", nil},
		{"a reader's znode", servers, "/a/__READ__0000000003", nil},
		{"a writer's znode", servers, "/a/__WRIT__0000000004", nil},
	}
	for _, c := range cases {
		_, lerr := zkio.NewLock(c.servers, c.path, c.opts...)
		_, eerr := zkio.NewElection(c.servers, c.path, c.opts...)
		_, rwerr := zkio.NewRWLock(c.servers, c.path, c.opts...)
		for _, err := range []error{lerr, eerr, rwerr} {
			if !errors.Is(err, zkio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) {
				t.Errorf("%s: %v, want zkio.ErrInvalidArgument and primitives.ErrInvalidArgument", c.name, err)
			}
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("%s: error of %d bytes", c.name, len(err.Error()))
			}
		}
	}
	if _, err := zkio.NewSession(nil); !errors.Is(err, zkio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("NewSession without servers: %v", err)
	}
	admin := adminConn(t, servers)
	for _, p := range []string{"/ok", "/a", "/b", long[:100], "/ok.epoch", "/zookeeper/quota/x"} {
		if exists, _, err := admin.Exists(p); err != nil || exists {
			t.Errorf("bad input left %s in ZooKeeper (%v)", p, err)
		}
	}
}

// TestTrailingSlash: "/a/" names the same lock as "/a".
func TestTrailingSlash(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	a, err := zkio.NewLock(servers, "/slash/a/", zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := zkio.NewLock(servers, "/slash/a", zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	g, err := a.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Key, "/slash/a/_c_") || !strings.Contains(g.Key, "-lock-") {
		t.Fatalf("key %q not in InterProcessMutex's layout", g.Key)
	}
	if _, err := b.TryLock(ctx); err == nil {
		t.Fatal(`"/slash/a/" and "/slash/a" are different locks`)
	}
}

// TestUnreachable: construction against servers that do not answer gives
// up when WithContext's context ends.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	port, err := testserver.ReservePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = zkio.NewLock([]string{fmt.Sprintf("127.0.0.1:%d", port)}, "/unreachable", zkio.WithContext(ctx))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("NewLock with no server: %v after %v, want DeadlineExceeded soon", err, time.Since(start))
	}
}

// TestSuperviseBadPath: lock.Supervise given a zkio lock on a bad path
// returns the construction's error at once, rather than retrying until its
// context ends.
func TestSuperviseBadPath(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	for _, path := range []string{"relative", "/a/b\x01c", "/x.epoch"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err := lock.Supervise(ctx, func(ctx context.Context) (lock.Service, error) {
			return zkio.NewLock(servers, path, zkio.WithSessionTimeout(5*time.Second), zkio.WithContext(ctx))
		}, func(context.Context, lock.Grant) error { return nil })
		cancel()
		if !errors.Is(err, primitives.ErrInvalidArgument) || time.Since(start) > 2*time.Second {
			t.Errorf("Supervise on %q: %v after %v, want ErrInvalidArgument at once", path, err, time.Since(start))
		}
	}
}

// TestSessionAccessors: a session's LeaseID is its ZooKeeper session id and
// its TTL the timeout the server granted, the same as SessionID and
// Timeout, and what its grants carry; without WithTTL it asks for
// driver.DefaultTTL.
func TestSessionAccessors(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	if zkio.DefaultSessionTimeout != driver.DefaultTTL {
		t.Fatalf("DefaultSessionTimeout %v, want driver.DefaultTTL %v", zkio.DefaultSessionTimeout, driver.DefaultTTL)
	}
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(4*time.Second)))
	if s.LeaseID() == 0 || s.LeaseID() != s.SessionID() || s.TTL() != s.Timeout() || s.TTL() != 4*time.Second {
		t.Fatalf("LeaseID %#x, SessionID %#x, TTL %v, Timeout %v", s.LeaseID(), s.SessionID(), s.TTL(), s.Timeout())
	}
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/accessors/lock", zkio.WithSession(s)))
	g, err := l.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if g.LeaseID != s.LeaseID() || g.TTL != s.TTL() {
		t.Fatalf("grant %+v on session %#x of TTL %v", g, s.LeaseID(), s.TTL())
	}
	d := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	if want := min(driver.DefaultTTL, 20*testserver.ZooKeeperTickTime); d.TTL() != want {
		t.Fatalf("TTL without WithTTL %v, want %v", d.TTL(), want)
	}
}
