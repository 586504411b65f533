package etcdio_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// conformanceTTL is the shortest whole-second lease that keeps the suite's
// pause laws (which wait for an expiry) quick without expiring healthy
// sessions on a loaded machine.
const conformanceTTL = 2 * time.Second

// TestConformance runs the backend-independent suite against etcdio.
func TestConformance(t *testing.T) {
	testkit.NoLeaks(t)
	conformance.Run(t, etcdBackend(t))
}

// etcdBackend makes each owner its own client and its own session, so that
// the hooks can revoke or pause exactly that owner's lease.
func etcdBackend(t *testing.T) conformance.Backend {
	admin := newClient(t)
	var sessions sync.Map // service -> *etcdio.Session
	var names sync.Map    // service -> the name it was made with
	session := func(t *testing.T, svc any) *etcdio.Session {
		t.Helper()
		s, ok := sessions.Load(svc)
		if !ok {
			t.Fatalf("conformance hook given a service the factory did not make: %T", svc)
		}
		return s.(*etcdio.Session)
	}
	// owner returns a new client and session for one owner, closed (the
	// session before the client) when t ends.
	owner := func(t *testing.T) (*clientv3.Client, *etcdio.Session) {
		t.Helper()
		cli := newClient(t)
		s, err := etcdio.NewSession(cli, etcdio.WithTTL(conformanceTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return cli, s
	}
	prefix := func(name string) string { return "/conformance/" + name }
	return conformance.Backend{
		Name: "etcd",
		TTL:  conformanceTTL,
		NewLock: func(t *testing.T, name string) lock.Service {
			cli, s := owner(t)
			l := testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, prefix(name), etcdio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			cli, s := owner(t)
			l := testkit.ClosedAtEnd[rwlock.Service](t)(etcdio.NewRWLock(cli, prefix(name), etcdio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		NewElection: func(t *testing.T, name string) election.Service {
			cli, s := owner(t)
			e := testkit.ClosedAtEnd[election.Service](t)(etcdio.NewElection(cli, prefix(name), etcdio.WithSession(s)))
			sessions.Store(e, s)
			names.Store(e, name)
			return e
		},
		KillSession: func(t *testing.T, svc any) {
			t.Helper()
			if _, err := admin.Revoke(context.Background(), session(t, svc).LeaseID()); err != nil {
				t.Fatal(err)
			}
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
			if _, err := admin.Delete(context.Background(), key); err != nil {
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
			l := testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(s.Client(), prefix(name), etcdio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		LayoutKeys: func(t *testing.T, name string) []string {
			t.Helper()
			resp, err := admin.Get(context.Background(), prefix(name)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, kv := range resp.Kvs {
				keys = append(keys, string(kv.Key))
			}
			return keys
		},
		DeleteWaiter: func(t *testing.T, svc any) {
			t.Helper()
			name, ok := names.Load(svc)
			if !ok {
				t.Fatalf("DeleteWaiter given a service the factory did not make: %T", svc)
			}
			// The waiter's key is the one under the name with its lease.
			lease := int64(session(t, svc).LeaseID())
			testkit.Eventually(t, 10*time.Second, "the waiter's key", func() bool {
				resp, err := admin.Get(context.Background(), prefix(name.(string))+"/", clientv3.WithPrefix())
				if err != nil {
					t.Fatal(err)
				}
				for _, kv := range resp.Kvs {
					if kv.Lease == lease {
						if _, err := admin.Delete(context.Background(), string(kv.Key)); err != nil {
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
				c, err = etcdio.NewLock(admin, name)
			case "rwlock":
				c, err = etcdio.NewRWLock(admin, name)
			case "election":
				c, err = etcdio.NewElection(admin, name)
			default:
				t.Fatalf("Construct: unknown kind %q", kind)
			}
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		MaxValue: etcdio.DefaultMaxValueSize,
		BadNames: []string{"/", strings.Repeat("x", 2048)},
	}
}
