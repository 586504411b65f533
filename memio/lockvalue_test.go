package memio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// A lock made WithValue gives its holder's and its waiters' keys the
// value, which Store.Value reads.
func TestLockValue(t *testing.T) {
	st := memio.NewStore()
	a, err := memio.NewLock(st, "/jobs/report", memio.WithValue("host-a:101"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := memio.NewLock(st, "/jobs/report", memio.WithValue("host-b:202"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := st.Value(g.Key); !ok || v != "host-a:101" {
		t.Fatalf("holder's key %s: value %q (exists %v), want host-a:101", g.Key, v, ok)
	}
	got := make(chan lock.Grant, 1)
	go func() { g, _ := b.Lock(ctx); got <- g }()
	var waiter string
	for deadline := time.Now().Add(5 * time.Second); waiter == ""; {
		for _, k := range st.Keys("/jobs/report") {
			if k != g.Key {
				waiter = k
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no waiter's key within 5s")
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
	if v, _ := st.Value(waiter); v != "host-b:202" {
		t.Fatalf("waiter's key %s: value %q, want host-b:202", waiter, v)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if g2 := <-got; g2.Key != waiter {
		t.Fatalf("the waiter got %+v", g2)
	}
	if _, ok := st.Value(g.Key); ok {
		t.Fatalf("released key %s still has a value", g.Key)
	}
}

// A value over the largest accepted, or WithValue on another constructor
// than NewLock, is refused with an error wrapping
// primitives.ErrInvalidArgument, and the store stays empty.
func TestLockValueRefused(t *testing.T) {
	st := memio.NewStore()
	cases := map[string]func() error{
		"over WithMaxValueSize": func() error {
			_, err := memio.NewLock(st, "/x", memio.WithValue("12345678901"), memio.WithMaxValueSize(10))
			return err
		},
		"over DefaultMaxValueSize": func() error {
			_, err := memio.NewLock(st, "/x", memio.WithValue(strings.Repeat("x", memio.DefaultMaxValueSize+1)))
			return err
		},
		"election": func() error { _, err := memio.NewElection(st, "/x", memio.WithValue("v")); return err },
		"rwlock":   func() error { _, err := memio.NewRWLock(st, "/x", memio.WithValue("v")); return err },
		"session":  func() error { _, err := memio.NewSession(st, memio.WithValue("v")); return err },
	}
	for what, c := range cases {
		if err := c(); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping primitives.ErrInvalidArgument", what, err)
		}
	}
	if keys := st.Keys(""); len(keys) != 0 {
		t.Fatalf("refused constructors left keys %q", keys)
	}
}
