package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

func verifyToken(t *testing.T, v *redisio.Verifier, what, scope string, tok fencing.Token, valid bool) {
	t.Helper()
	err := v.Verify(context.Background(), scope, tok)
	if valid && err != nil || !valid && !errors.Is(err, fencing.ErrTokenForged) {
		t.Errorf("%s (token %d): %v, want valid %v", what, tok, err, valid)
	}
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	cli := newClient(t, r)
	ctx := context.Background()
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	on := redisio.WithSession(s)

	t.Run("lock", func(t *testing.T) {
		const name = "verify/lock"
		v, err := redisio.NewVerifier(cli, "lock", name)
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, on))
		b := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, on))
		g1, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the holder's token", "", g1.Token(), true)
		verifyToken(t, v, "a token above every grant", "", g1.Token()+1000, false)
		verifyToken(t, v, "a token below the holder's", "", g1.Token()-1, false)
		verifyToken(t, v, "the holder's token on another name", "verify/other", g1.Token(), false)
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "a released holder's token", "", g1.Token(), false)
		g2, err := b.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the next holder's token", name, g2.Token(), true)
	})
	t.Run("election", func(t *testing.T) {
		const name = "verify/election"
		v, err := redisio.NewVerifier(cli, "election", "")
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name, on))
		if err := a.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		l, _ := a.Term()
		verifyToken(t, v, "the leader's token", name, l.Token(), true)
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "a resigned leader's token", name, l.Token(), false)
	})
	t.Run("rwlock", func(t *testing.T) {
		const name = "verify/rwlock"
		v, err := redisio.NewVerifier(cli, "rwlock", name)
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[rwlock.Service](t)(redisio.NewRWLock(cli, name, on))
		b := testkit.ClosedAtEnd[rwlock.Service](t)(redisio.NewRWLock(cli, name, on))
		w, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the writer's token", "", w.Token(), true)
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "a released writer's token", "", w.Token(), false)
		r1, err := a.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the readers' token", "", r1.Token(), true)
	})
	t.Run("semaphore", func(t *testing.T) {
		const name = "verify/semaphore"
		v, err := redisio.NewVerifier(cli, "semaphore", "")
		if err != nil {
			t.Fatal(err)
		}
		sem := testkit.ClosedAtEnd[semaphore.Service](t)(redisio.NewSemaphore(cli, name, 2, on))
		g, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the slot holder's token", g.Scope(), g.Token(), true)
		verifyToken(t, v, "its token on another slot", semaphore.Scope(name, g.Slot+1), g.Token(), false)
		verifyToken(t, v, "a scope with no slot", name, g.Token(), false)
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
