package zkio_test

import (
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
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
	servers := startZooKeeper(t)
	testkit.NoLeaks(t)
	conformance.Run(t, zkBackend(t, servers))
}

// zkBackend makes each owner its own session, so that the hooks can kill
// or pause exactly that owner's session.
func zkBackend(t *testing.T, servers []string) conformance.Backend {
	b, _ := zkBackendOwners(t, servers)
	return b
}

// zkBackendOwners is zkBackend, and a function that makes a new session
// for an owner and registers the service made on it, so that the hooks
// serve it too.
func zkBackendOwners(t *testing.T, servers []string) (conformance.Backend, func(t *testing.T, name string, build func(*zkio.Session) any)) {
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
	var names sync.Map // service -> the name it was made with
	// owner returns a new session for one owner, closed when t ends.
	owner := func(t *testing.T) *zkio.Session {
		t.Helper()
		return testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(conformanceTimeout)))
	}
	path := func(name string) string { return "/conformance/" + name }
	register := func(t *testing.T, name string, build func(*zkio.Session) any) {
		s := owner(t)
		svc := build(s)
		sessions.Store(svc, s)
		names.Store(svc, name)
	}
	return conformance.Backend{
		Name: "zookeeper",
		TTL:  conformanceTimeout,
		NewLock: func(t *testing.T, name string) lock.Service {
			s := owner(t)
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path(name), zkio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			s := owner(t)
			l := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(nil, path(name), zkio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		NewElection: func(t *testing.T, name string) election.Service {
			s := owner(t)
			e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, path(name), zkio.WithSession(s)))
			sessions.Store(e, s)
			names.Store(e, name)
			return e
		},
		KillSession: func(t *testing.T, svc any) {
			t.Helper()
			zkio.KillSession(session(t, svc))
		},
		Pause: func(t *testing.T, svc any) func() {
			t.Helper()
			resume := make(chan struct{})
			testhook.PauseSession(session(t, svc), resume)
			var once sync.Once
			return func() { once.Do(func() { close(resume) }) }
		},
		DeleteKey: func(t *testing.T, key string) {
			t.Helper()
			if err := admin.Delete(key, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				t.Fatal(err)
			}
		},
		PauseRenewal: func(t *testing.T, svc any) func() {
			t.Helper()
			resume := make(chan struct{})
			testhook.PauseRenewal(session(t, svc), resume)
			var once sync.Once
			return func() { once.Do(func() { close(resume) }) }
		},
		NewLockSharing: func(t *testing.T, name string, with lock.Service) lock.Service {
			t.Helper()
			s := session(t, with)
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path(name), zkio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		LayoutKeys: func(t *testing.T, name string) []string {
			t.Helper()
			kids, _, err := admin.Children(path(name))
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, len(kids))
			for i, k := range kids {
				keys[i] = path(name) + "/" + k
			}
			return keys
		},
		DeleteWaiter: func(t *testing.T, svc any) {
			t.Helper()
			name, ok := names.Load(svc)
			if !ok {
				t.Fatalf("DeleteWaiter given a service the factory did not make: %T", svc)
			}
			// The waiter's znode is the one its session owns.
			id, dir := session(t, svc).LeaseID(), path(name.(string))
			testkit.Eventually(t, 10*time.Second, "the waiter's znode", func() bool {
				kids, _, err := admin.Children(dir)
				if err != nil && !errors.Is(err, zk.ErrNoNode) {
					t.Fatal(err)
				}
				for _, k := range kids {
					if _, st, err := admin.Get(dir + "/" + k); err == nil && st.EphemeralOwner == id {
						if err := admin.Delete(dir+"/"+k, -1); err != nil {
							t.Fatal(err)
						}
						return true
					}
				}
				return false
			})
		},
		Construct: func(t *testing.T, kind, name string) (io.Closer, error) {
			t.Helper()
			var c io.Closer
			var err error
			switch kind {
			case "lock":
				c, err = zkio.NewLock(servers, name)
			case "rwlock":
				c, err = zkio.NewRWLock(servers, name)
			case "election":
				c, err = zkio.NewElection(servers, name)
			default:
				t.Fatalf("Construct: unknown kind %q", kind)
			}
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		MaxValue: zkio.DefaultMaxDataSize,
		BadNames: []string{"/", "relative", "/a//b", "/a/\x01", "/zookeeper", "/x.epoch", "/a/__READ__0000000003", "/" + strings.Repeat("x", 2000)},
	}, register
}
