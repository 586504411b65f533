package zkio_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/zkio"
)

// conformanceTimeout is a session timeout short enough to keep the pause
// laws (which wait for an expiry) quick, long enough not to expire healthy
// sessions on a loaded machine.
const conformanceTimeout = 2 * time.Second

// TestConformance runs the backend-independent suite against zkio.
func TestConformance(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	conformance.Run(t, zkBackend(t, servers))
}

// zkBackend makes each owner its own session, so that the hooks can kill
// or pause exactly that owner's session.
func zkBackend(t *testing.T, servers []string) conformance.Backend {
	admin := adminConn(t, servers)
	var sessions sync.Map // service -> *zkio.Session
	session := func(t *testing.T, svc any) *zkio.Session {
		t.Helper()
		s, ok := sessions.Load(svc)
		if !ok {
			t.Fatalf("conformance hook given a service the factory did not make: %T", svc)
		}
		return s.(*zkio.Session)
	}
	owner := func(t *testing.T) *zkio.Session {
		t.Helper()
		s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(conformanceTimeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	path := func(name string) string { return "/conformance/" + name }
	return conformance.Backend{
		Name: "zookeeper",
		TTL:  conformanceTimeout,
		NewLock: func(t *testing.T, name string) lock.Service {
			s := owner(t)
			l := closedAtEnd[lock.Service](t)(zkio.NewLock(nil, path(name), zkio.WithSession(s)))
			sessions.Store(l, s)
			return l
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			s := owner(t)
			l := closedAtEnd[rwlock.Service](t)(zkio.NewRWLock(nil, path(name), zkio.WithSession(s)))
			sessions.Store(l, s)
			return l
		},
		NewElection: func(t *testing.T, name string) election.Service {
			s := owner(t)
			e := closedAtEnd[election.Service](t)(zkio.NewElection(nil, path(name), zkio.WithSession(s)))
			sessions.Store(e, s)
			return e
		},
		KillSession: func(t *testing.T, svc any) {
			t.Helper()
			zkio.KillSession(session(t, svc))
		},
		Pause: func(t *testing.T, svc any) func() {
			t.Helper()
			resume := make(chan struct{})
			zkio.PauseSession(session(t, svc), resume)
			var once sync.Once
			return func() { once.Do(func() { close(resume) }) }
		},
		DeleteKey: func(t *testing.T, key string) {
			t.Helper()
			if err := admin.Delete(key, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				t.Fatal(err)
			}
		},
	}
}

var _ = context.Background
