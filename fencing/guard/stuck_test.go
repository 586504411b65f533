package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testkit"
)

// stuckOnce wraps a real store; after stick, its next Load blocks, whatever
// its context says, until the test ends (a call on a dead connection of a
// driver that ignores its context), while every later Load answers.
type stuckOnce struct {
	guard.MarkStore
	mu      sync.Mutex
	armed   bool
	gate    chan struct{}
	entered chan struct{}
}

func newStuckOnce(t *testing.T) *stuckOnce {
	s := &stuckOnce{MarkStore: fileStore(t, t.TempDir()), gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	t.Cleanup(func() { close(s.gate) })
	return s
}

func (s *stuckOnce) stick() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

func (s *stuckOnce) Load(ctx context.Context, scope string) (fencing.Token, error) {
	s.mu.Lock()
	stuck := s.armed
	s.armed = false
	s.mu.Unlock()
	if stuck {
		s.entered <- struct{}{}
		<-s.gate
	}
	return s.MarkStore.Load(ctx, scope)
}

// TestStuckCallDoesNotWedgeTheScope: a store call that never returns (it
// ignores its context) fails the requests that wait for it within the
// store timeout; once its waiters have given up, later requests of the
// scope do not wait for it, but call the store afresh, which answers.
// Before, a stuck read of a shared store (a token at the mark) or a stuck
// first Load failed every later request of its scope until it returned.
func TestStuckCallDoesNotWedgeTheScope(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, mode := range []string{"read", "load"} {
		t.Run(mode, func(t *testing.T) {
			store := newStuckOnce(t)
			opts := []guard.Option{guard.WithStore(store), guard.WithStoreTimeout(timeout)}
			if mode == "load" {
				opts = append(opts, guard.WithExclusiveStore())
			}
			for _, keyed := range []bool{false, true} {
				var check func(fencing.Token) error
				if keyed {
					k := guard.NewKeyed(opts...)
					check = func(tok fencing.Token) error { return k.Check("/s", tok) }
				} else {
					check = guard.New(opts...).Check
				}
				if mode == "read" {
					// A raise: loaded, mark 5. Fsynced on a loaded machine, it
					// can outlast the short timeout under test; one that lands
					// after its caller gave up still stores the mark.
					testkit.Eventually(t, 10*time.Second, "the mark stored", func() bool { return check(5) == nil })
				} else if err := store.Raise(context.Background(), scopeOf(keyed), 5); err != nil {
					t.Fatal(err)
				}
				store.stick()
				mustStoreRejection(t, within(t, 2*time.Second, "a request on a stuck "+mode, func() error { return check(5) }), "stuck "+mode)
				recv(t, store.entered, "the stuck call")
				for i := range 3 {
					if err := within(t, 2*time.Second, "a request after the stuck call was given up", func() error { return check(5) }); err != nil {
						t.Fatalf("keyed %v: request %d at the mark after the stuck %s was given up, with the store answering: %v", keyed, i, mode, err)
					}
				}
				if err := check(4); !errors.Is(err, fencing.ErrTokenStale) {
					t.Fatalf("Check(4) below the mark 5: %v", err)
				}
			}
		})
	}
}

func scopeOf(keyed bool) string {
	if keyed {
		return "/s"
	}
	return ""
}

// hungLoads is a store whose every Load, once on is set, blocks, whatever
// its context says, until the test ends; it counts the Loads in progress.
type hungLoads struct {
	guard.MarkStore
	on      atomic.Bool
	gate    chan struct{}
	running atomic.Int64
}

func (h *hungLoads) Load(ctx context.Context, scope string) (fencing.Token, error) {
	if !h.on.Load() {
		return h.MarkStore.Load(ctx, scope)
	}
	h.running.Add(1)
	defer h.running.Add(-1)
	<-h.gate
	return h.MarkStore.Load(ctx, scope)
}

// TestStuckCallsAreBounded: a store that hangs every read and ignores its
// context holds a goroutine per read the guard started. Later requests do
// not wait for a read every waiter gave up on (TestStuckCallDoesNotWedgeTheScope),
// but only up to a few such reads per scope: then they wait again, so a
// store that hangs for good does not cost a goroutine per store timeout
// for as long as requests come.
func TestStuckCallsAreBounded(t *testing.T) {
	store := &hungLoads{MarkStore: fileStore(t, t.TempDir()), gate: make(chan struct{})}
	t.Cleanup(func() { close(store.gate) })
	g := guard.New(guard.WithStore(store), guard.WithStoreTimeout(30*time.Millisecond))
	// A fsynced raise on a loaded machine can outlast the short timeout
	// under test; one that lands after its caller gave up still stores
	// the mark, which a later Check then finds.
	testkit.Eventually(t, 10*time.Second, "the mark stored", func() bool { return g.Check(5) == nil })
	store.on.Store(true)
	for range 20 {
		if err := g.Check(5); !errors.Is(err, guard.ErrStore) {
			t.Fatalf("Check on a hung store: %v, want an error wrapping guard.ErrStore", err)
		}
	}
	if n := store.running.Load(); n > 5 {
		t.Fatalf("%d reads of one scope hung at once, want at most 5", n)
	}
}

// hungRaises is a store whose every Raise, once on is set, blocks,
// whatever its context says, until the test ends; it counts the Raises in
// progress.
type hungRaises struct {
	guard.MarkStore
	on      atomic.Bool
	gate    chan struct{}
	running atomic.Int64
}

func (h *hungRaises) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if !h.on.Load() {
		return h.MarkStore.Raise(ctx, scope, t)
	}
	h.running.Add(1)
	defer h.running.Add(-1)
	<-h.gate
	return h.MarkStore.Raise(ctx, scope, t)
}

// TestStuckRaisesAreBounded: a store that hangs every raise (and every
// read a guard makes through a raise: a scope's first token on a shared
// store) and ignores its context holds a few goroutines per scope, not one
// per request for as long as requests come: a request beyond them is
// refused at once with ErrStore. Every request started a raise of its own.
func TestStuckRaisesAreBounded(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			store := &hungRaises{MarkStore: fileStore(t, t.TempDir()), gate: make(chan struct{})}
			t.Cleanup(func() { close(store.gate) })
			opts := []guard.Option{guard.WithStore(store), guard.WithStoreTimeout(30 * time.Millisecond)}
			if exclusive {
				opts = append(opts, guard.WithExclusiveStore())
			}
			g := guard.New(opts...)
			testkit.Eventually(t, 10*time.Second, "the mark stored", func() bool { return g.Check(5) == nil })
			store.on.Store(true)
			for i := range 20 {
				if err := g.Check(fencing.Token(6 + i)); !errors.Is(err, guard.ErrStore) {
					t.Fatalf("Check on a hung store: %v, want an error wrapping guard.ErrStore", err)
				}
			}
			if n := store.running.Load(); n > 5 {
				t.Fatalf("%d raises of one scope hung at once, want at most 5", n)
			}
		})
	}
}

// TestStuckFirstReadsAreBounded: a guard's first requests of a scope on a
// shared store read the mark through a raise (Raise, then Load, on a store
// that cannot do both at once); a store that hangs every read holds a few
// goroutines for them, not one per request.
func TestStuckFirstReadsAreBounded(t *testing.T) {
	store := &hungLoads{MarkStore: fileStore(t, t.TempDir()), gate: make(chan struct{})}
	t.Cleanup(func() { close(store.gate) })
	if err := guard.New(guard.WithStore(store)).Check(5); err != nil {
		t.Fatal(err)
	}
	g := guard.New(guard.WithStore(store), guard.WithStoreTimeout(30*time.Millisecond))
	store.on.Store(true)
	for range 20 {
		if err := g.Check(5); !errors.Is(err, guard.ErrStore) {
			t.Fatalf("Check on a hung store: %v, want an error wrapping guard.ErrStore", err)
		}
	}
	if n := store.running.Load(); n > 5 {
		t.Fatalf("%d reads of one scope hung at once, want at most 5", n)
	}
}
