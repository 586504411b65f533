package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

func verifyToken(t *testing.T, v *zkio.Verifier, what, scope string, tok fencing.Token, valid bool) {
	t.Helper()
	err := v.Verify(context.Background(), scope, tok)
	if valid && err != nil || !valid && !errors.Is(err, fencing.ErrTokenForged) {
		t.Errorf("%s (token %d): %v, want valid %v", what, tok, err, valid)
	}
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx := context.Background()
	s, err := zkio.NewSession(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	on := zkio.WithSession(s)

	t.Run("lock", func(t *testing.T) {
		const p = "/verify/lock"
		v, err := zkio.NewVerifier(s, "lock", p)
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, p, on))
		b := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, p, on))
		g1, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the holder's token", "", g1.Token(), true)
		verifyToken(t, v, "a token above every grant", "", g1.Token()+1<<20, false)
		verifyToken(t, v, "a token below the holder's", "", g1.Token()-1, false)
		verifyToken(t, v, "the holder's token on another path", "/verify/other", g1.Token(), false)
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "a released holder's token", "", g1.Token(), false)
		g2, err := b.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the next holder's token", p, g2.Token(), true)
	})
	t.Run("election", func(t *testing.T) {
		const p = "/verify/election"
		v, err := zkio.NewVerifier(s, "election", "")
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, p, on))
		if err := a.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		l, _ := a.Term()
		verifyToken(t, v, "the leader's token", p, l.Token(), true)
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "a resigned leader's token", p, l.Token(), false)
	})
	t.Run("rwlock", func(t *testing.T) {
		const p = "/verify/rwlock"
		v, err := zkio.NewVerifier(s, "rwlock", p)
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(nil, p, on))
		b := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(nil, p, on))
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
		r2, err := b.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the readers' token", "", r1.Token(), true)
		verifyToken(t, v, "the other reader's token", "", r2.Token(), r2.Token() == r1.Token())
		verifyToken(t, v, "the writer's token among readers", "", w.Token(), false)
		_ = a.RUnlock(ctx)
		_ = b.RUnlock(ctx)
		if err := zkio.RetireRWLock(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("semaphore", func(t *testing.T) {
		const p = "/verify/semaphore"
		v, err := zkio.NewVerifier(s, "semaphore", "")
		if err != nil {
			t.Fatal(err)
		}
		sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, p, 2, on))
		g, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "the slot holder's token", g.Scope(), g.Token(), true)
		verifyToken(t, v, "its token on another slot", semaphore.Scope(p, g.Slot+1), g.Token(), false)
		verifyToken(t, v, "a scope with no slot", p, g.Token(), false)
		if err := sem.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		verifyToken(t, v, "a released slot holder's token", g.Scope(), g.Token(), false)
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
