package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/zkio"
)

// TestWaiterKeyDeleted: a waiter whose own znode is deleted behind its back
// fails promptly, while the holder ahead still holds, with an error
// wrapping ErrLost; it leaves nothing behind, and its primitive stays
// usable.
func TestWaiterKeyDeleted(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	opts := []zkio.Option{zkio.WithSessionTimeout(5 * time.Second)}
	type pair struct {
		hold, wait func(context.Context) (string, error) // the holder's key; the waiter's wait
		again      func(context.Context) error           // the waiter's primitive, once free
		release    func(context.Context) error           // the holder's release
	}
	cases := map[string]func(path string) pair{
		"lock": func(path string) pair {
			h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, opts...))
			w := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, opts...))
			return pair{
				hold:    func(ctx context.Context) (string, error) { g, err := h.Lock(ctx); return g.Key, err },
				wait:    func(ctx context.Context) (string, error) { g, err := w.Lock(ctx); return g.Key, err },
				again:   func(ctx context.Context) error { _, err := w.TryLock(ctx); return err },
				release: h.Unlock,
			}
		},
		"rwlock reader": func(path string) pair {
			h := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(servers, path, opts...))
			w := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(servers, path, opts...))
			return pair{
				hold:    func(ctx context.Context) (string, error) { g, err := h.Lock(ctx); return g.Key, err },
				wait:    func(ctx context.Context) (string, error) { g, err := w.RLock(ctx); return g.Key, err },
				again:   func(ctx context.Context) error { _, err := w.TryRLock(ctx); return err },
				release: h.Unlock,
			}
		},
		"election": func(path string) pair {
			h := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(servers, path, opts...))
			w := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(servers, path, opts...))
			key := func(e election.Service) string { l, _ := e.Term(); return l.Key }
			return pair{
				hold:    func(ctx context.Context) (string, error) { err := h.Campaign(ctx, "h"); return key(h), err },
				wait:    func(ctx context.Context) (string, error) { err := w.Campaign(ctx, "w"); return key(w), err },
				again:   func(ctx context.Context) error { return w.Campaign(ctx, "w") },
				release: h.Resign,
			}
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := "/waiterkey/" + name
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			p := mk(path)
			hk, err := p.hold(ctx)
			if err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { _, err := p.wait(ctx); waited <- err }()
			queued(t, servers, path, 2)
			children, _, err := admin.Children(path)
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(children, func(c string) bool { return path+"/"+c != hk })
			if err := admin.Delete(path+"/"+children[i], -1); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				if !errors.Is(err, primitives.ErrLost) {
					t.Fatalf("wait whose znode was deleted: %v, want ErrLost", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter whose znode was deleted still waits after 5s, its holder still holding")
			}
			queued(t, servers, path, 1) // only the holder's znode
			if err := p.release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := p.again(ctx); err != nil {
				t.Fatalf("the waiter's primitive after its failed wait: %v", err)
			}
		})
	}
}

// TestObserveWatchersBounded: many Observe calls whose contexts end, on an
// election nobody changes, leave the session's watches and goroutines as
// they were: each Observe's read adds no watch beside the ones already
// armed. Not parallel: it counts the process's goroutines.
func TestObserveWatchersBounded(t *testing.T) {
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, "/observe/watchers", zkio.WithSession(s)))
	if err := e.Campaign(ctx, "stable"); err != nil {
		t.Fatal(err)
	}
	observe := func() {
		t.Helper()
		octx, ocancel := context.WithCancel(ctx)
		defer ocancel()
		if l, ok := <-e.Observe(octx); !ok || l.Value != "stable" {
			t.Fatalf("Observe: %+v, %v", l, ok)
		}
	}
	observe()
	before, goroutines := zkio.Watchers(s), runtime.NumGoroutine()
	const calls = 200
	for range calls {
		observe()
	}
	if after := zkio.Watchers(s); after > before+2 {
		t.Fatalf("%d watches after %d Observe calls, %d before", after, calls, before)
	}
	// The goroutines of ended observations end (they are the loop's
	// subscriptions); poll for it.
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("at most %d goroutines after %d Observe calls", goroutines+5, calls), func() bool {
		return runtime.NumGoroutine() <= goroutines+5
	})
	// The follower still sees changes.
	ch := e.Observe(ctx)
	<-ch
	if err := e.Proclaim(ctx, "changed"); err != nil {
		t.Fatal(err)
	}
	for l := range ch {
		if l.Value == "changed" {
			return
		}
	}
	t.Fatal("Observe closed before the change")
}
