package guard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testkit"
)

// panicking wraps a real store; while on is set, its Load and Raise panic,
// as a store with a bug (or a nil *markstore.File from an ignored error)
// does.
type panicking struct {
	guard.MarkStore
	on atomic.Bool
}

func (p *panicking) Load(ctx context.Context, scope string) (fencing.Token, error) {
	if p.on.Load() {
		panic("store bug in Load")
	}
	return p.MarkStore.Load(ctx, scope)
}

func (p *panicking) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if p.on.Load() {
		panic("store bug in Raise")
	}
	return p.MarkStore.Raise(ctx, scope, t)
}

// panickingVerifier panics while on is set, and otherwise says yes.
type panickingVerifier struct{ on atomic.Bool }

func (v *panickingVerifier) Verify(context.Context, string, fencing.Token) error {
	if v.on.Load() {
		panic("verifier bug")
	}
	return nil
}

// TestStorePanicIsARejection: a store or verifier that panics is called on
// a goroutine of the guard's, where no one (net/http, the caller) could
// recover the panic, so it would take the whole process down. The guard
// rejects the request instead (ErrStore, ErrUnverified), raises no mark,
// and accepts again once the store and verifier work.
func TestStorePanicIsARejection(t *testing.T) {
	for _, mode := range []string{"shared", "exclusive"} {
		t.Run(mode, func(t *testing.T) {
			testkit.NoLeaks(t)
			store := &panicking{MarkStore: fileStore(t, t.TempDir())}
			v := &panickingVerifier{}
			opts := []guard.Option{guard.WithStore(store), guard.WithVerifier(v)}
			if mode == "exclusive" {
				opts = append(opts, guard.WithExclusiveStore())
			}
			g := guard.New(opts...)
			k := guard.NewKeyed(opts...)

			store.on.Store(true)
			if err := g.Check(5); !errors.Is(err, guard.ErrStore) {
				t.Fatalf("Check on a store that panics: %v, want an error wrapping guard.ErrStore", err)
			}
			if _, done, err := k.Admit(context.Background(), "/s", 5); !errors.Is(err, guard.ErrStore) {
				done()
				t.Fatalf("Keyed.Admit on a store that panics: %v, want an error wrapping guard.ErrStore", err)
			}
			if m := g.Mark(); m != 0 {
				t.Fatalf("mark %d after rejections, want 0", m)
			}
			store.on.Store(false)
			if err := g.Check(5); err != nil {
				t.Fatalf("Check once the store works: %v", err)
			}

			v.on.Store(true)
			if err := g.Check(6); !errors.Is(err, guard.ErrUnverified) {
				t.Fatalf("Check with a verifier that panics: %v, want an error wrapping guard.ErrUnverified", err)
			}
			if err := g.Check(5); err != nil {
				t.Fatalf("Check at the mark (no verification): %v", err)
			}
			v.on.Store(false)
			if err := g.Check(6); err != nil {
				t.Fatalf("Check once the verifier works: %v", err)
			}
			if err := g.Check(5); !errors.Is(err, fencing.ErrTokenStale) {
				t.Fatalf("Check(5) below the mark 6: %v", err)
			}
		})
	}
}

// TestMarkIgnoresRefusedTokens: Mark is the highest token accepted (or
// read from the store), not the highest seen: a token refused as forged,
// unverified, or because its raise in the store failed leaves it where it
// was; an Admit that raised the mark and gave up waiting keeps it raised.
func TestMarkIgnoresRefusedTokens(t *testing.T) {
	v := newGrants()
	v.grant("", 5)
	store := &panicking{MarkStore: fileStore(t, t.TempDir())}
	g := guard.New(guard.WithVerifier(v), guard.WithStore(store))
	if err := g.Check(5); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(1 << 40); !errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("forged token: %v", err)
	}
	v.grant("", 9)
	store.on.Store(true)
	if err := g.Check(9); !errors.Is(err, guard.ErrStore) {
		t.Fatalf("token 9 on a failing store: %v", err)
	}
	if m := g.Mark(); m != 5 {
		t.Fatalf("Mark %d after refusals, want 5", m)
	}

	p := guard.New()
	_, done, err := p.Admit(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := p.Admit(ctx, 4); err == nil {
		t.Fatal("Admit(4) with a lower token in flight and its context over succeeded")
	}
	if m := p.Mark(); m != 4 {
		t.Fatalf("Mark %d after an Admit of 4 that gave up waiting, want 4", m)
	}
}
