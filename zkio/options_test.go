package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testserver"
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
	}
	for _, c := range cases {
		_, lerr := zkio.NewLock(c.servers, c.path, c.opts...)
		_, eerr := zkio.NewElection(c.servers, c.path, c.opts...)
		_, rwerr := zkio.NewRWLock(c.servers, c.path, c.opts...)
		for _, err := range []error{lerr, eerr, rwerr} {
			if !errors.Is(err, zkio.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
			}
			if err != nil && len(err.Error()) > 200 {
				t.Errorf("%s: error of %d bytes", c.name, len(err.Error()))
			}
		}
	}
	if _, err := zkio.NewSession(nil); !errors.Is(err, zkio.ErrInvalidArgument) {
		t.Errorf("NewSession without servers: %v", err)
	}
	admin := adminConn(t, servers)
	for _, p := range []string{"/ok", "/a", "/b", long[:100]} {
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
	port, err := testserver.FreePort()
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
