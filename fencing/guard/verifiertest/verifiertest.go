// Package verifiertest checks a guard.Verifier through the guard that uses
// it (guard.WithVerifier), against the backend's real store: the current
// holder's token is admitted, a token above every grant or one no holder
// ever had is refused without moving the mark, a released holder's token
// is refused even by a fresh guard, and with the store down a raise is
// refused as unverified within the guard's store timeout (Run). RunKinds
// checks the verifiers of every kind of primitive directly: a lock's, a
// read/write lock's, an election's, a semaphore slot's. Each backend runs
// both with its NewVerifier; a user writing a verifier can run them too.
package verifiertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/storetest"
	"github.com/ahrtr/disco/primitives/lock"
)

// Backend is what Run needs of a backend.
type Backend struct {
	// Verifier judges the tokens of the primitive named Scope.
	Verifier guard.Verifier
	// Scope is the name the tokens are of: Run uses a keyed guard on it,
	// or a plain Guard if it is "" (the verifier then knows the name).
	Scope string
	// Hold acquires a grant of Scope with an owner of its own and returns
	// its token and the release of that grant.
	Hold func(ctx context.Context) (fencing.Token, func(context.Context) error, error)
	// Forged returns a token that no holder of Scope ever had, below the
	// store's current revision (or counter): Run calls it while the first
	// grant is held.
	Forged func(ctx context.Context) fencing.Token
	// Down makes the store unreachable for good (the server stopped); nil
	// for a store that cannot be down (memio), and Run then skips that
	// part.
	Down func()
}

// Bound is the store timeout of the guard Run builds with the store down:
// a refusal must come within a few times it.
const Bound = 500 * time.Millisecond

// Run checks b (see the package documentation). It calls b.Down last.
func Run(t *testing.T, b Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type checker struct {
		check func(fencing.Token) error
		mark  func() fencing.Token
	}
	newGuard := func(opts ...guard.Option) checker {
		opts = append(opts, guard.WithVerifier(b.Verifier))
		if b.Scope == "" {
			g := guard.New(opts...)
			return checker{g.Check, g.Mark}
		}
		k := guard.NewKeyed(opts...)
		return checker{
			func(t fencing.Token) error { return k.Check(b.Scope, t) },
			func() fencing.Token { return k.Mark(b.Scope) },
		}
	}
	refused := func(g checker, what string, tok, mark fencing.Token) {
		t.Helper()
		err := g.check(tok)
		if !errors.Is(err, fencing.ErrTokenForged) {
			t.Fatalf("%s (token %d): %v, want an error wrapping fencing.ErrTokenForged", what, tok, err)
		}
		if m := g.mark(); m != mark {
			t.Fatalf("%s (token %d) refused, but the mark moved from %d to %d", what, tok, mark, m)
		}
	}

	first, releaseFirst, err := b.Hold(ctx)
	if err != nil {
		t.Fatalf("the first grant: %v", err)
	}
	g := newGuard()
	if err := g.check(first); err != nil {
		t.Fatalf("the current holder's token %d: %v", first, err)
	}
	refused(g, "a token above every grant", first+1<<40, first)
	forged := b.Forged(ctx)
	if forged <= 0 || forged == first {
		t.Fatalf("Backend.Forged gave %d (the holder's token is %d)", forged, first)
	}
	refused(newGuard(), "on a fresh guard, a forged token below the current revision that no holder had", forged, 0)

	if err := releaseFirst(ctx); err != nil {
		t.Fatalf("releasing the first grant: %v", err)
	}
	refused(newGuard(), "on a fresh guard, a released holder's token (no holder now)", first, 0)
	second, releaseSecond, err := b.Hold(ctx)
	if err != nil {
		t.Fatalf("the second grant: %v", err)
	}
	defer func() {
		// The store may be down by now: give the release a short while.
		rctx, cancel := context.WithTimeout(context.Background(), Bound)
		defer cancel()
		_ = releaseSecond(rctx)
	}()
	refused(newGuard(), "on a fresh guard, a released holder's token (another holds now)", first, 0)
	if err := g.check(second); err != nil {
		t.Fatalf("the next holder's token %d: %v", second, err)
	}

	if b.Down == nil {
		return
	}
	// The store down: a raise is refused as unverified, within the bound.
	reg := prometheus.NewRegistry()
	m, err := guard.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	down := newGuard(guard.WithStoreTimeout(Bound), guard.WithMetrics(m))
	b.Down()
	start := time.Now()
	err = down.check(second)
	if d := time.Since(start); d > 4*Bound {
		t.Fatalf("with the store down, a raise took %v to be refused (store timeout %v)", d, Bound)
	}
	if !errors.Is(err, guard.ErrUnverified) || errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("with the store down, token %d: %v, want an error wrapping guard.ErrUnverified", second, err)
	}
	if mk := down.mark(); mk != 0 {
		t.Fatalf("with the store down, the mark moved to %d", mk)
	}
	if n := storetest.Rejections(t, reg, guard.ReasonUnverified); n != 1 {
		t.Fatalf("%v rejections with reason unverified, want 1", n)
	}
	if err := g.check(second); err != nil {
		t.Fatalf("with the store down, the token at the mark: %v (it needs no verification)", err)
	}
}

// LockHold returns a Backend.Hold that locks a lock made by newLock (one
// per grant, closed when t ends) and releases it with Unlock.
func LockHold(t *testing.T, newLock func() (lock.Service, error)) func(context.Context) (fencing.Token, func(context.Context) error, error) {
	return func(ctx context.Context) (fencing.Token, func(context.Context) error, error) {
		l, err := newLock()
		if err != nil {
			return 0, nil, err
		}
		t.Cleanup(func() { l.Close() })
		g, err := l.Lock(ctx)
		if err != nil {
			return 0, nil, err
		}
		return g.Token(), l.Unlock, nil
	}
}
