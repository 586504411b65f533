package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestReservedNames: a name whose keys fall in disco's own key trees
// (disco/session/<id>, the session keys, and disco/sessions, their
// counter) is refused by every constructor with an error wrapping
// primitives.ErrInvalidArgument, and nothing is written; the names next to
// them are accepted.
func TestReservedNames(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	cli := newClient(t, r)
	refused := []string{
		"disco/session", "disco/session/", "disco/session/1", "disco/session/x/y",
		"disco/sessions", "disco/sessions/", "disco/sessions/a",
	}
	accepted := []string{
		"disco", "disco/", "disco/x", "disco/sessionx", "disco/sessions2", "disco/Session",
		"/disco/session", "xdisco/session", "a", "a/b",
	}
	makers := map[string]func(name string) (interface{ Close() error }, error){
		"lock":      func(n string) (interface{ Close() error }, error) { return redisio.NewLock(cli, n) },
		"rwlock":    func(n string) (interface{ Close() error }, error) { return redisio.NewRWLock(cli, n) },
		"election":  func(n string) (interface{ Close() error }, error) { return redisio.NewElection(cli, n) },
		"semaphore": func(n string) (interface{ Close() error }, error) { return redisio.NewSemaphore(cli, n, 2) },
		"double barrier": func(n string) (interface{ Close() error }, error) {
			return redisio.NewDoubleBarrier(cli, n, 2)
		},
	}
	ctx := context.Background()
	for what, mk := range makers {
		for _, name := range refused {
			if cli.FlushAll(ctx).Err() != nil {
				t.Fatal("flush")
			}
			svc, err := mk(name)
			if !errors.Is(err, primitives.ErrInvalidArgument) {
				if err == nil {
					svc.Close()
				}
				t.Errorf("%s %q: %v, want an error wrapping ErrInvalidArgument", what, name, err)
				continue
			}
			if n, err := cli.DBSize(ctx).Result(); err != nil || n != 0 {
				t.Errorf("%s %q refused, but Redis holds %d keys (%v)", what, name, n, err)
			}
		}
		for _, name := range accepted {
			svc, err := mk(name)
			if err != nil {
				t.Errorf("%s %q: %v, want it accepted", what, name, err)
				continue
			}
			svc.Close()
		}
	}
}

// TestNestedNamesAreIndependent: a lock held on "a" does not hold back a
// lock on any name below it, whatever the nested name's last segment
// (including the suffixes of "a"'s own keys), nor does a lock below hold
// back "a".
func TestNestedNamesAreIndependent(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	parent := lockOn(t, r, "a")
	if _, err := parent.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	var kids []lock.Service
	for _, n := range []string{"a/b", "a/1", "a/2", "a/queue", "a/seq", "a/held", "a/rtok", "a/wake", "a/b/c"} {
		l := lockOn(t, r, n)
		kids = append(kids, l)
		if _, err := l.TryLock(ctx); err != nil {
			t.Fatalf("TryLock %q while %q is held: %v", n, "a", err)
		}
	}
	if err := parent.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.TryLock(ctx); err != nil {
		t.Fatalf("TryLock %q while names below it are held: %v", "a", err)
	}
	for _, l := range kids {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := parent.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
