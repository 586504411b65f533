package memio_test

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// conformanceTTL is memio's shortest TTL: the suite's expiry laws wait for
// it on the real clock.
const conformanceTTL = time.Second

// memBackend gives each owner its own session on one store, so that the
// hooks hurt exactly that owner.
type memBackend struct {
	st       *memio.Store
	sessions sync.Map // service or party -> *memio.Session
}

func (m *memBackend) session(t *testing.T, svc any) *memio.Session {
	t.Helper()
	s, ok := m.sessions.Load(svc)
	if !ok {
		t.Fatalf("conformance hook given a service the factory did not make: %T", svc)
	}
	return s.(*memio.Session)
}

// owner returns a new session, closed when t ends.
func (m *memBackend) owner(t *testing.T) *memio.Session {
	t.Helper()
	s, err := memio.NewSession(m.st, memio.WithTTL(conformanceTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func prefix(name string) string { return "/conformance/" + name }

// made records that svc runs on s and returns it.
func made[S any](m *memBackend, s *memio.Session, svc S) S {
	m.sessions.Store(svc, s)
	return svc
}

func (m *memBackend) backend() conformance.Backend {
	return conformance.Backend{
		Name: "memory",
		TTL:  conformanceTTL,
		NewLock: func(t *testing.T, name string) lock.Service {
			s := m.owner(t)
			return made(m, s, testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(m.st, prefix(name), memio.WithSession(s))))
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			s := m.owner(t)
			return made(m, s, testkit.ClosedAtEnd[rwlock.Service](t)(memio.NewRWLock(m.st, prefix(name), memio.WithSession(s))))
		},
		NewElection: func(t *testing.T, name string) election.Service {
			s := m.owner(t)
			return made(m, s, testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(m.st, prefix(name), memio.WithSession(s))))
		},
		KillSession: func(t *testing.T, svc any) { m.session(t, svc).Expire() },
		Pause:       func(t *testing.T, svc any) func() { return m.session(t, svc).Pause() },
		DeleteKey: func(t *testing.T, key string) {
			t.Helper()
			if !m.st.DeleteKey(key) {
				t.Fatalf("DeleteKey %s: no such key", key)
			}
		},
		PauseRenewal: func(t *testing.T, svc any) func() {
			s := m.session(t, svc)
			s.StopRenewals()
			return s.Resume
		},
		NewLockSharing: func(t *testing.T, name string, with lock.Service) lock.Service {
			s := m.session(t, with)
			return made(m, s, testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(m.st, prefix(name), memio.WithSession(s))))
		},
		LayoutKeys: func(t *testing.T, name string) []string { return m.st.Keys(prefix(name) + "/") },
		DeleteWaiter: func(t *testing.T, svc any) {
			t.Helper()
			mine := "-"
			if s := m.session(t, svc); s != nil {
				mine = "/" + itoa(s.LeaseID()) + "-"
			}
			testkit.Eventually(t, 10*time.Second, "the waiter's key", func() bool {
				for _, k := range m.st.Keys("/conformance/") {
					if strings.Contains(k, mine) && m.st.DeleteKey(k) {
						return true
					}
				}
				return false
			})
		},
		Construct: func(t *testing.T, kind, name string) (io.Closer, error) {
			switch kind {
			case "lock":
				return memio.NewLock(m.st, name)
			case "rwlock":
				return memio.NewRWLock(m.st, name)
			default:
				return memio.NewElection(m.st, name)
			}
		},
		MaxValue: memio.DefaultMaxValueSize,
		BadNames: []string{strings.Repeat("n", 1025), "bad\xff"},
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestConformance(t *testing.T) {
	testkit.NoLeaks(t)
	m := &memBackend{st: memio.NewStore()}
	base := m.backend()
	t.Run("Primitives", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, base)
	})
	t.Run("Semaphore", func(t *testing.T) {
		t.Parallel()
		b := conformance.SemaphoreBackend{Backend: base}
		b.NewSemaphore = func(t *testing.T, name string, n int) (semaphore.Service, error) {
			s := m.owner(t)
			svc, err := memio.NewSemaphore(m.st, prefix(name), n, memio.WithSession(s))
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { svc.Close() })
			return made(m, s, svc), nil
		}
		conformance.TestSemaphore(t, b)
	})
	bb := conformance.BarrierBackend{Backend: base}
	bb.NewBarrier = func(t *testing.T, name string) barrier.Barrier {
		x, err := memio.NewBarrier(m.st, prefix(name))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	bb.NewDoubleBarrier = func(t *testing.T, name string, count int) barrier.DoubleBarrier {
		s := m.owner(t)
		return made(m, s, testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(memio.NewDoubleBarrier(m.st, prefix(name), count, memio.WithSession(s))))
	}
	bb.BarrierKeys = func(t *testing.T, name string) []string {
		var keys []string
		for _, k := range m.st.Keys(prefix(name)) {
			if k == prefix(name) || strings.HasPrefix(k, prefix(name)+"/") {
				keys = append(keys, k)
			}
		}
		return keys
	}
	t.Run("Barrier", func(t *testing.T) {
		t.Parallel()
		conformance.TestBarrier(t, bb)
	})
	t.Run("DoubleBarrier", func(t *testing.T) {
		t.Parallel()
		conformance.TestDoubleBarrier(t, bb)
	})
}
