package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

// TestVerifier: redisio's verifiers pass the verifier kit's laws for
// every kind (verifiertest.RunKinds), and refuse bad input.
func TestVerifier(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	on := redisio.WithSession(s)
	verifiertest.RunKinds(t, verifiertest.Kinds{
		NewVerifier: func(t *testing.T, kind, name string) guard.Verifier {
			v, err := redisio.NewVerifier(cli, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
		Name: func(t *testing.T, suffix string) string { return "verify/" + t.Name() + "/" + suffix },
		NewLock: func(t *testing.T, name string) lock.Service {
			return testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, on))
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			return testkit.ClosedAtEnd[rwlock.Service](t)(redisio.NewRWLock(cli, name, on))
		},
		NewElection: func(t *testing.T, name string) election.Service {
			return testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name, on))
		},
		NewSemaphore: func(t *testing.T, name string, n int) semaphore.Service {
			return testkit.ClosedAtEnd[semaphore.Service](t)(redisio.NewSemaphore(cli, name, n, on))
		},
	})
	t.Run("bad input", func(t *testing.T) {
		if _, err := redisio.NewVerifier(nil, "lock", "x"); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("nil client: %v", err)
		}
		if _, err := redisio.NewVerifier(cli, "mutex", "x"); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("unknown kind: %v", err)
		}
		if _, err := redisio.NewVerifier(cli, "lock", "disco/session"); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("reserved name: %v", err)
		}
	})
}

// TestVerifierBounded: with Redis down, Verify fails within its context
// with an error that is not ErrTokenForged.
func TestVerifierBounded(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
	defer cli.Close()
	v, err := redisio.NewVerifier(cli, "lock", "verify/bounded")
	if err != nil {
		t.Fatal(err)
	}
	r.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := v.Verify(ctx, "", 5); err == nil || errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("Verify with Redis down: %v, want an error, not ErrTokenForged", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Verify took %v with a 500ms bound", d)
	}
}
