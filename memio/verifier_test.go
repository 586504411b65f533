package memio_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

func TestVerifier(t *testing.T) {
	ctx := context.Background()
	st := memio.NewStore()
	check := func(v *memio.Verifier, what, scope string, tok fencing.Token, valid bool) {
		t.Helper()
		err := v.Verify(ctx, scope, tok)
		if valid && err != nil || !valid && !errors.Is(err, fencing.ErrTokenForged) {
			t.Errorf("%s (token %d): %v, want valid %v", what, tok, err, valid)
		}
	}
	lv, err := memio.NewVerifier(st, "lock", "/l")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := memio.NewLock(st, "/l")
	b, _ := memio.NewLock(st, "/l")
	defer a.Close()
	defer b.Close()
	g1, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check(lv, "the holder's token", "", g1.Token(), true)
	check(lv, "a token above every grant", "", g1.Token()+100, false)
	check(lv, "the holder's token on another name", "/m", g1.Token(), false)
	var g2 lock.Grant
	done := make(chan error, 1)
	go func() { g2, err = b.Lock(ctx); done <- err }()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check(lv, "a released holder's token", "", g1.Token(), false)
	check(lv, "the next holder's token", "", g2.Token(), true)

	sv, err := memio.NewVerifier(st, "semaphore", "")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := memio.NewSemaphore(st, "/s", 2)
	defer s.Close()
	sg, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check(sv, "the slot holder's token", sg.Scope(), sg.Token(), true)
	check(sv, "the token on another slot", semaphore.Scope("/s", sg.Slot+1), sg.Token(), false)
	check(sv, "a scope with no slot", "/s", sg.Token(), false)
	if _, err := memio.NewVerifier(st, "mutex", ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("unknown kind: %v, want ErrInvalidArgument", err)
	}
	if _, err := memio.NewVerifier(nil, "lock", ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("nil Store: %v, want ErrInvalidArgument", err)
	}
}
