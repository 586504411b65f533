package redisio_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

// conformanceTTL keeps the suite's pause laws (which wait for an expiry)
// quick without expiring healthy sessions on a loaded machine. The laws
// that bound how soon a holder or a waiter learns of its deleted key
// allow half of it, against a refresh every third and a look every
// quarter: at 2 s that left 333 ms for an answer from a Redis that fsyncs
// every write, and a CI run under -race took longer (LayoutKeyDeleted:
// the holder told after the second).
const conformanceTTL = 3 * time.Second

// TestConformance runs the backend-independent suite against redisio on a
// real redis-server with appendfsync always.
func TestConformance(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	conformance.Run(t, redisBackend(t, r, nil))
}

// TestSemaphoreConformance runs the suite's semaphore section against
// redisio, each owner on its own client and session.
func TestSemaphoreConformance(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	var newSem func(t *testing.T, name string, n int) (semaphore.Service, error)
	b := conformance.SemaphoreBackend{Backend: redisBackend(t, r, &newSem)}
	b.NewSemaphore = newSem
	conformance.TestSemaphore(t, b)
}

// redisBackend makes each owner its own client and its own session, so
// that the hooks can kill or pause exactly that owner's session. If newSem
// is not nil it is set to a semaphore factory whose owners the hooks know.
func redisBackend(t *testing.T, r *testserver.Redis, newSem *func(t *testing.T, name string, n int) (semaphore.Service, error)) conformance.Backend {
	admin := newClient(t, r)
	var sessions sync.Map // service -> *redisio.Session
	session := func(t *testing.T, svc any) *redisio.Session {
		t.Helper()
		s, ok := sessions.Load(svc)
		if !ok {
			t.Fatalf("conformance hook given a service the factory did not make: %T", svc)
		}
		return s.(*redisio.Session)
	}
	var clients sync.Map // *redisio.Session -> *redis.Client
	var names sync.Map   // service -> the name it was made with
	owner := func(t *testing.T) (*redis.Client, *redisio.Session) {
		t.Helper()
		cli := newClient(t, r)
		s, err := redisio.NewSession(cli, redisio.WithTTL(conformanceTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		clients.Store(s, cli)
		return cli, s
	}
	keysOf := func(t *testing.T, name string) []string { return nameKeys(t, admin, name) }
	if newSem != nil {
		*newSem = func(t *testing.T, name string, n int) (semaphore.Service, error) {
			cli, s := owner(t)
			svc, err := redisio.NewSemaphore(cli, name, n, redisio.WithSession(s))
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { svc.Close() })
			sessions.Store(svc, s)
			names.Store(svc, name)
			return svc, nil
		}
	}
	return conformance.Backend{
		Name: "redis",
		TTL:  conformanceTTL,
		NewLock: func(t *testing.T, name string) lock.Service {
			cli, s := owner(t)
			l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, redisio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			cli, s := owner(t)
			l := testkit.ClosedAtEnd[rwlock.Service](t)(redisio.NewRWLock(cli, name, redisio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		NewElection: func(t *testing.T, name string) election.Service {
			cli, s := owner(t)
			e := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name, redisio.WithSession(s)))
			sessions.Store(e, s)
			names.Store(e, name)
			return e
		},
		KillSession: func(t *testing.T, svc any) {
			t.Helper()
			if err := admin.Del(context.Background(), session(t, svc).Key()).Err(); err != nil {
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
			if err := admin.Del(context.Background(), key).Err(); err != nil {
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
			cli, _ := clients.Load(s)
			l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli.(*redis.Client), name, redisio.WithSession(s)))
			sessions.Store(l, s)
			names.Store(l, name)
			return l
		},
		LayoutKeys: keysOf,
		DeleteWaiter: func(t *testing.T, svc any) {
			t.Helper()
			name, ok := names.Load(svc)
			if !ok {
				t.Fatalf("DeleteWaiter given a service the factory did not make: %T", svc)
			}
			// The waiter's key is the hold hash naming its session.
			own := session(t, svc).Key()
			testkit.Eventually(t, 10*time.Second, "the waiter's hold key", func() bool {
				for _, k := range keysOf(t, name.(string)) {
					if sess, err := admin.HGet(context.Background(), k, "s").Result(); err == nil && sess == own {
						if err := admin.Del(context.Background(), k).Err(); err != nil {
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
				c, err = redisio.NewLock(admin, name)
			case "rwlock":
				c, err = redisio.NewRWLock(admin, name)
			case "election":
				c, err = redisio.NewElection(admin, name)
			default:
				t.Fatalf("Construct: unknown kind %q", kind)
			}
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		BadNames: []string{"disco/session", "disco/sessions", "disco/session/7"},
		MaxValue: redisio.DefaultMaxValueSize,
	}
}

// globEscape quotes the characters a Redis KEYS pattern gives a meaning.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(s)
}

// nameKeys lists name's own keys: name/ and one segment (a nested name's
// keys have a further "/").
func nameKeys(t *testing.T, admin *redis.Client, name string) []string {
	t.Helper()
	all, err := admin.Keys(context.Background(), globEscape(name)+"/*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range all {
		if !strings.Contains(k[len(name)+1:], "/") {
			keys = append(keys, k)
		}
	}
	return keys
}
