package memio_test

import (
	"errors"
	"testing"

	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// TestVerifier: memio's verifiers pass the verifier kit's laws for every
// kind (verifiertest.RunKinds), and refuse bad input.
func TestVerifier(t *testing.T) {
	st := memio.NewStore()
	verifiertest.RunKinds(t, verifiertest.Kinds{
		NewVerifier: func(t *testing.T, kind, name string) guard.Verifier {
			v, err := memio.NewVerifier(st, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
		Name: func(t *testing.T, suffix string) string { return "/" + t.Name() + "/" + suffix },
		NewLock: func(t *testing.T, name string) lock.Service {
			return testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, name))
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			return testkit.ClosedAtEnd[rwlock.Service](t)(memio.NewRWLock(st, name))
		},
		NewElection: func(t *testing.T, name string) election.Service {
			return testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(st, name))
		},
		NewSemaphore: func(t *testing.T, name string, n int) semaphore.Service {
			return testkit.ClosedAtEnd[semaphore.Service](t)(memio.NewSemaphore(st, name, n))
		},
	})
	if _, err := memio.NewVerifier(st, "mutex", ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("unknown kind: %v, want ErrInvalidArgument", err)
	}
	if _, err := memio.NewVerifier(nil, "lock", ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("nil Store: %v, want ErrInvalidArgument", err)
	}
}
