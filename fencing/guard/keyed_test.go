package guard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// TestKeyedManyScopesInterleaved: tokens are revisions of one cluster, so a
// scope's grant can be older than another scope's latest token. Each scope
// sees its own tokens in order, interleaved with every other scope's; none
// is rejected, and each scope then rejects its own older tokens only.
func TestKeyedManyScopesInterleaved(t *testing.T) {
	for _, withStore := range []bool{false, true} {
		t.Run(fmt.Sprintf("store=%v", withStore), func(t *testing.T) {
			var opts []guard.Option
			if withStore {
				opts = append(opts, guard.WithStore(fileStore(t, t.TempDir())), guard.WithMaxIdleScopes(16))
			}
			k := guard.NewKeyed(opts...)
			const scopes = 100
			// Hand out global revisions 1..N to scopes at random; each scope's
			// tokens increase, but scopes interleave arbitrarily.
			per := make([][]fencing.Token, scopes)
			for rev := fencing.Token(1); rev <= 1000; rev++ {
				i := rand.IntN(scopes)
				per[i] = append(per[i], rev)
			}
			var wg sync.WaitGroup
			for i := range scopes {
				wg.Go(func() {
					scope := fmt.Sprintf("/locks/orders/%d", i)
					for _, tok := range per[i] {
						for range 3 { // the holder sends several requests
							if err := k.Check(scope, tok); err != nil {
								t.Errorf("scope %s token %d falsely rejected: %v", scope, tok, err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			for i, toks := range per {
				scope := fmt.Sprintf("/locks/orders/%d", i)
				if len(toks) < 2 {
					continue
				}
				last := toks[len(toks)-1]
				if m := k.Mark(scope); m != last {
					t.Fatalf("mark of %s = %d, want %d", scope, m, last)
				}
				if err := k.Check(scope, toks[len(toks)-2]); !errors.Is(err, fencing.ErrTokenStale) {
					t.Fatalf("scope %s accepted its older token %d: %v", scope, toks[len(toks)-2], err)
				}
			}
		})
	}
}

// TestKeyedAdmitIsPerScope: a higher token of one scope supersedes that
// scope's requests only.
func TestKeyedAdmitIsPerScope(t *testing.T) {
	k := guard.NewKeyed()
	ctx := context.Background()
	a5, doneA5, err := k.Admit(ctx, "/a", 5)
	if err != nil {
		t.Fatal(err)
	}
	b3, doneB3, err := k.Admit(ctx, "/b", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer doneB3()
	ch := make(chan error, 1)
	go func() {
		_, done, err := k.Admit(ctx, "/a", 7)
		if err == nil {
			done()
		}
		ch <- err
	}()
	mustStale(t, a5, "scope /a's token 5")
	alive(t, b3, "scope /b's token 3")
	notYet(t, ch, "token 7 admitted before token 5 is done")
	doneA5()
	doneA5() // idempotent
	if err := recv(t, ch, "token 7 of /a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k.Admit(ctx, "/a", 6); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Admit(/a, 6) after 7: %v", err)
	}
	if _, _, err := k.Admit(ctx, "", 6); !errors.Is(err, fencing.ErrNoScope) || !errors.Is(err, fencing.ErrNoToken) {
		t.Fatalf("Admit with no scope: %v", err)
	}
	if err := k.Check(strings.Repeat("x", guard.MaxScopeLen+1), 1); !errors.Is(err, fencing.ErrMalformedScope) {
		t.Fatalf("overlong scope: %v", err)
	}
}

// TestKeyedBadTokenKeepsNoScope: a request with no usable token (t <= 0)
// is rejected before its scope is looked at, so it leaves nothing behind:
// without a store a Keyed never drops a scope it holds, and requests with
// bad tokens and ever new scopes would grow it without bound.
func TestKeyedBadTokenKeepsNoScope(t *testing.T) {
	k := guard.NewKeyed()
	for i := range 100 {
		scope := fmt.Sprintf("/locks/%d", i)
		if err := k.Check(scope, fencing.Token(-i)); !errors.Is(err, fencing.ErrNoToken) {
			t.Fatalf("Check(%q, %d): %v, want an error wrapping fencing.ErrNoToken", scope, -i, err)
		}
		if _, done, err := k.Admit(context.Background(), scope, 0); !errors.Is(err, fencing.ErrNoToken) {
			done()
			t.Fatalf("Admit(%q, 0): %v, want an error wrapping fencing.ErrNoToken", scope, err)
		}
	}
	if n := k.Scopes(); n != 0 {
		t.Fatalf("%d scopes held after requests with no usable token, want 0", n)
	}
}
