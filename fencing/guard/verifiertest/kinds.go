package verifiertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// Kinds is what RunKinds needs of a backend: its verifiers and the
// primitives whose tokens they judge. Every factory registers the Close of
// what it makes (and any clean-up of the name's keys) with t.Cleanup.
type Kinds struct {
	// NewVerifier makes the backend's verifier of kind ("lock", "rwlock",
	// "election", "semaphore") for the primitive named name, or, with name
	// "", one that takes the name as each Verify's scope.
	NewVerifier func(t *testing.T, kind, name string) guard.Verifier
	// Name returns a name of the backend for the primitive of one check,
	// unique to t and suffix.
	Name func(t *testing.T, suffix string) string

	NewLock      func(t *testing.T, name string) lock.Service
	NewRWLock    func(t *testing.T, name string) rwlock.Service
	NewElection  func(t *testing.T, name string) election.Service
	NewSemaphore func(t *testing.T, name string, n int) semaphore.Service
}

// RunKinds checks, for each kind of primitive, that its verifier admits
// the tokens of current grants and refuses, with an error wrapping
// fencing.ErrTokenForged, every token no current grant of the scope
// carries: one above every grant, one below the holder's, the holder's on
// another name, a released or resigned grant's, a writer's among readers,
// a semaphore holder's on another slot; and that a Verify given a nil
// context fails with primitives.ErrInvalidArgument. Each kind is a
// subtest.
// A kind whose factory is nil (a backend without it) is skipped.
func RunKinds(t *testing.T, k Kinds) {
	t.Helper()
	for _, c := range []struct {
		kind  string
		offer bool
		run   func(*testing.T, Kinds)
	}{
		{"lock", k.NewLock != nil, kindLock},
		{"election", k.NewElection != nil, kindElection},
		{"rwlock", k.NewRWLock != nil, kindRWLock},
		{"semaphore", k.NewSemaphore != nil, kindSemaphore},
	} {
		t.Run(c.kind, func(t *testing.T) {
			if !c.offer {
				t.Skipf("the backend offers no %s", c.kind)
			}
			c.run(t, k)
		})
	}
}

// above is added to a token to make one above every grant: more than a
// test's grants move any store's counter (a revision, a zxid, a counter).
const above = 1 << 20

// verify asserts what v says of tok in scope: nil if valid, else an error
// wrapping fencing.ErrTokenForged.
func verify(t *testing.T, v guard.Verifier, what, scope string, tok fencing.Token, valid bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := v.Verify(ctx, scope, tok)
	switch {
	case valid && err != nil:
		t.Errorf("%s (token %d, scope %q): %v, want it admitted", what, tok, scope, err)
	case !valid && !errors.Is(err, fencing.ErrTokenForged):
		t.Errorf("%s (token %d, scope %q): %v, want an error wrapping fencing.ErrTokenForged", what, tok, scope, err)
	}
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// grant returns the grant of an acquisition, failing t if it failed.
func grant[G any](t *testing.T, what string) func(G, error) G {
	return func(g G, err error) G {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return g
	}
}

func kindLock(t *testing.T, k Kinds) {
	ctx := ctxOf(t)
	name, other := k.Name(t, "lock"), k.Name(t, "lock-other")
	v := k.NewVerifier(t, "lock", name)
	every := k.NewVerifier(t, "lock", "")
	a, b := k.NewLock(t, name), k.NewLock(t, name)
	g1 := grant[lock.Grant](t, "Lock")(a.Lock(ctx))
	verify(t, v, "the holder's token", "", g1.Token(), true)
	verify(t, v, "the holder's token, scope given", name, g1.Token(), true)
	verify(t, every, "the holder's token, to a verifier of every name", name, g1.Token(), true)
	var noContext context.Context
	if err := v.Verify(noContext, "", g1.Token()); !errors.Is(err, primitives.ErrInvalidArgument) || errors.Is(err, fencing.ErrTokenForged) {
		t.Errorf("Verify with a nil context: %v, want an error wrapping primitives.ErrInvalidArgument (not ErrTokenForged)", err)
	}
	verify(t, v, "a token above every grant", "", g1.Token()+above, false)
	verify(t, v, "a token below the holder's", "", g1.Token()-1, false)
	verify(t, every, "the holder's token on another name", other, g1.Token(), false)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	verify(t, v, "a released holder's token", "", g1.Token(), false)
	g2 := grant[lock.Grant](t, "the next Lock")(b.Lock(ctx))
	verify(t, v, "the next holder's token", "", g2.Token(), true)
	verify(t, v, "the first holder's token under the next", "", g1.Token(), false)
}

func kindElection(t *testing.T, k Kinds) {
	ctx := ctxOf(t)
	name := k.Name(t, "election")
	v := k.NewVerifier(t, "election", "")
	a, b := k.NewElection(t, name), k.NewElection(t, name)
	if err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	la, _ := a.Term()
	verify(t, v, "the leader's token", name, la.Token(), true)
	verify(t, v, "a token above every grant", name, la.Token()+above, false)
	waiting := make(chan error, 1)
	go func() { waiting <- b.Campaign(ctx, "b") }()
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Term()
	verify(t, v, "the new leader's token", name, lb.Token(), true)
	verify(t, v, "a resigned leader's token", name, la.Token(), false)
}

func kindRWLock(t *testing.T, k Kinds) {
	ctx := ctxOf(t)
	name := k.Name(t, "rwlock")
	v := k.NewVerifier(t, "rwlock", name)
	a, b := k.NewRWLock(t, name), k.NewRWLock(t, name)
	w := grant[rwlock.Grant](t, "Lock")(a.Lock(ctx))
	verify(t, v, "the writer's token", "", w.Token(), true)
	verify(t, v, "a token below the writer's", "", w.Token()-1, false)
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	verify(t, v, "a released writer's token", "", w.Token(), false)
	r1 := grant[rwlock.Grant](t, "RLock")(a.RLock(ctx))
	r2 := grant[rwlock.Grant](t, "the second RLock")(b.RLock(ctx))
	verify(t, v, "the first reader's token", "", r1.Token(), true)
	verify(t, v, "the second reader's token", "", r2.Token(), true)
	verify(t, v, "the writer's token among readers", "", w.Token(), false)
	for _, l := range []rwlock.Service{a, b} {
		if err := l.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func kindSemaphore(t *testing.T, k Kinds) {
	ctx := ctxOf(t)
	name := k.Name(t, "semaphore")
	v := k.NewVerifier(t, "semaphore", "")
	s := k.NewSemaphore(t, name, 2)
	g := grant[semaphore.Grant](t, "Acquire")(s.Acquire(ctx))
	verify(t, v, "the slot holder's token", g.Scope(), g.Token(), true)
	verify(t, v, "its token on another slot", semaphore.Scope(name, 1-g.Slot), g.Token(), false)
	verify(t, v, "a scope with no slot", name, g.Token(), false)
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	verify(t, v, "a released slot holder's token", g.Scope(), g.Token(), false)
}
