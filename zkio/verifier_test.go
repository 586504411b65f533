package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

// TestVerifier: zkio's verifiers pass the verifier kit's laws for every
// kind (verifiertest.RunKinds), and refuse bad input.
func TestVerifier(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	on := zkio.WithSession(s)
	verifiertest.RunKinds(t, verifiertest.Kinds{
		NewVerifier: func(t *testing.T, kind, name string) guard.Verifier {
			v, err := zkio.NewVerifier(s, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
		Name: func(t *testing.T, suffix string) string { return "/verify/" + t.Name() + "/" + suffix },
		NewLock: func(t *testing.T, name string) lock.Service {
			return testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, name, on))
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			t.Cleanup(func() { _ = zkio.RetireRWLock(context.Background(), s, name) })
			return testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(nil, name, on))
		},
		NewElection: func(t *testing.T, name string) election.Service {
			return testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, name, on))
		},
		NewSemaphore: func(t *testing.T, name string, n int) semaphore.Service {
			return testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, name, n, on))
		},
	})
	t.Run("bad input", func(t *testing.T) {
		if _, err := zkio.NewVerifier(nil, "lock", "/x"); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("nil session: %v", err)
		}
		if _, err := zkio.NewVerifier(s, "mutex", "/x"); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("unknown kind: %v", err)
		}
		if _, err := zkio.NewVerifier(s, "lock", "x"); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("relative path: %v", err)
		}
	})
}

// TestVerifierBounded: with the ensemble out of reach, Verify fails within
// its context with an error that is not ErrTokenForged.
func TestVerifierBounded(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	s, err := zkio.NewSession([]string{px.Addr()}, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := zkio.NewVerifier(s, "lock", "/verify/bounded")
	if err != nil {
		t.Fatal(err)
	}
	px.BlackholeTx()
	px.BlackholeRx()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = v.Verify(ctx, "", 5)
	if err == nil || errors.Is(err, fencing.ErrTokenForged) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Verify with the ensemble out of reach: %v, want a deadline error, not ErrTokenForged", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Verify took %v with a 300ms bound", d)
	}
	px.UnblackholeTx()
	px.UnblackholeRx()
}
