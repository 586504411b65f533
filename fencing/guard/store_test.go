package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// counting wraps a real store and counts its raises. It offers only Load
// and Raise, so a guard that shares it takes the fallback (Raise, then
// Load) for a raise.
type counting struct {
	guard.MarkStore
	raises atomic.Int64
}

func (c *counting) Raise(ctx context.Context, scope string, t fencing.Token) error {
	c.raises.Add(1)
	return c.MarkStore.Raise(ctx, scope, t)
}

// countingLoads is counting that also counts loads.
type countingLoads struct {
	guard.MarkStore
	raises, loads atomic.Int64
}

func (c *countingLoads) Raise(ctx context.Context, scope string, t fencing.Token) error {
	c.raises.Add(1)
	return c.MarkStore.Raise(ctx, scope, t)
}

func (c *countingLoads) Load(ctx context.Context, scope string) (fencing.Token, error) {
	c.loads.Add(1)
	return c.MarkStore.Load(ctx, scope)
}

func fileStoreErr(dir string) (*counting, error) {
	s, err := markstore.NewFile(dir)
	if err != nil {
		return nil, err
	}
	return &counting{MarkStore: s}, nil
}

func fileStore(t testing.TB, dir string) *counting {
	t.Helper()
	s, err := fileStoreErr(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStoredGuardWritesOnlyHigherTokens: equal tokens, however many and
// however concurrent, cost no store write; each new higher token one.
func TestStoredGuardWritesOnlyHigherTokens(t *testing.T) {
	store := fileStore(t, t.TempDir())
	k := guard.NewKeyed(guard.WithStore(store))
	g := guard.New(guard.WithStore(store))
	for _, tok := range []fencing.Token{10, 20} {
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() {
				for range 50 {
					if err := k.Check("/s", tok); err != nil {
						t.Error(err)
					}
					_, done, err := k.Admit(context.Background(), "/s", tok)
					if err != nil {
						t.Error(err)
						return
					}
					done()
					if err := g.Check(tok); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	// Two tokens, two guards; concurrent first requests of a token may each
	// write it, but never more than once per request that saw it first.
	if n := store.raises.Load(); n < 4 || n > 4*32 {
		t.Fatalf("%d store writes for 2 tokens on 2 guards", n)
	}
	before := store.raises.Load()
	for range 1000 {
		if err := k.Check("/s", 20); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(20); err != nil {
			t.Fatal(err)
		}
	}
	if n := store.raises.Load() - before; n != 0 {
		t.Fatalf("%d store writes for 2000 checks of the current token, want 0", n)
	}
}

// TestStoredGuardSurvivesRestart: a guard rebuilt on the store rejects the
// zombie's token, for a plain Guard and a Keyed one.
func TestStoredGuardSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	g := guard.New(guard.WithStore(fileStore(t, dir)))
	k := guard.NewKeyed(guard.WithStore(fileStore(t, dir)))
	if err := g.Check(41); err != nil {
		t.Fatal(err)
	}
	if _, done, err := k.Admit(context.Background(), "/orders/42", 7); err != nil {
		t.Fatal(err)
	} else {
		done()
	}
	// "Restart": new guards on a new store value over the same files.
	g2 := guard.New(guard.WithStore(fileStore(t, dir)))
	if err := g2.Load(context.Background()); err != nil || g2.Mark() != 41 {
		t.Fatalf("reloaded mark %d, %v; want 41", g2.Mark(), err)
	}
	if err := g2.Check(40); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("zombie token 40 after restart: %v", err)
	}
	k2 := guard.NewKeyed(guard.WithStore(fileStore(t, dir)))
	if err := k2.Check("/orders/42", 6); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("zombie token 6 of /orders/42 after restart: %v", err)
	}
	if err := k2.Check("/orders/43", 6); err != nil {
		t.Fatalf("another scope's token 6: %v", err)
	}
}

// TestStoreFailureAdmitsNothing: when the store cannot raise, the token is
// not accepted and the mark in memory is not raised. (Exclusive: so that
// the current token needs no store.)
func TestStoreFailureAdmitsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "marks")
	k := guard.NewKeyed(guard.WithStore(fileStore(t, dir)), guard.WithExclusiveStore())
	if err := k.Check("/s", 5); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err := k.Check("/s", 9)
	if !errors.Is(err, guard.ErrStore) {
		t.Fatalf("Check with a broken store: %v, want ErrStore", err)
	}
	if m := k.Mark("/s"); m != 5 {
		t.Fatalf("mark %d after a failed raise, want 5", m)
	}
	if err := k.Check("/s", 5); err != nil {
		t.Fatalf("the current token needs no store: %v", err)
	}
}

// TestDroppedScopesKeepTheirMarks: with a store and room for few idle
// scopes, scopes are dropped and read back, never below their marks; a
// scope with an admitted request is never dropped.
func TestDroppedScopesKeepTheirMarks(t *testing.T) {
	k := guard.NewKeyed(guard.WithStore(fileStore(t, t.TempDir())), guard.WithMaxIdleScopes(4))
	held, done, err := k.Admit(context.Background(), "/held", 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := k.Check(fmt.Sprintf("/s/%d", i), fencing.Token(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := k.Scopes(); n > 16 {
		t.Fatalf("%d scopes in memory, want a few", n)
	}
	alive(t, held, "the admitted request")
	for i := range 100 {
		if err := k.Check(fmt.Sprintf("/s/%d", i), fencing.Token(99+i)); !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("scope /s/%d accepted a token below its mark after being dropped: %v", i, err)
		}
	}
	ch := make(chan error, 1)
	go func() {
		_, d, err := k.Admit(context.Background(), "/held", 4)
		if err == nil {
			d()
		}
		ch <- err
	}()
	mustStale(t, held, "the held request superseded") // same state: not dropped
	done()
	if err := recv(t, ch, "token 4"); err != nil {
		t.Fatal(err)
	}
}

// TestDroppingNeverLowersAMark: many goroutines check random tokens on a
// few scopes of a stored Keyed guard that may keep only one idle scope, so
// scopes are dropped and reloaded all the time. A token below a mark that
// was enforced (accepted) before the check began is never accepted.
func TestDroppingNeverLowersAMark(t *testing.T) {
	k := guard.NewKeyed(guard.WithStore(fileStore(t, t.TempDir())), guard.WithMaxIdleScopes(1))
	const scopes = 8
	var enforced [scopes]atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 300 {
				i := rand.IntN(scopes)
				tok := fencing.Token(1 + rand.IntN(40))
				before := enforced[i].Load()
				err := k.Check(fmt.Sprintf("/s/%d", i), tok)
				switch {
				case err == nil && int64(tok) < before:
					t.Errorf("scope %d accepted %d below the enforced mark %d", i, tok, before)
					return
				case err == nil:
					for {
						cur := enforced[i].Load()
						if int64(tok) <= cur || enforced[i].CompareAndSwap(cur, int64(tok)) {
							break
						}
					}
				case !errors.Is(err, fencing.ErrTokenStale):
					t.Errorf("Check: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}
