package guard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
)

// TestNilContext: every exported method of Guard and Keyed that takes a
// context, given a nil one, returns an error that says "nil context" and
// wraps primitives.ErrInvalidArgument, never panics, and leaves nothing
// behind: nothing admitted, no mark moved (in memory or in the store), no
// call of the store or the verifier, no scope kept, no rejection counted.
// Whatever the guard is built with: nothing, a store (shared or
// exclusive), a verifier.
func TestNilContext(t *testing.T) {
	var nilCtx context.Context
	const initial, tok = fencing.Token(5), fencing.Token(7)
	calls := []struct {
		name string
		call func(g *guard.Guard, k *guard.Keyed) error
	}{
		{"Guard.Load", func(g *guard.Guard, _ *guard.Keyed) error { return g.Load(nilCtx) }},
		{"Guard.CheckContext", func(g *guard.Guard, _ *guard.Keyed) error { return g.CheckContext(nilCtx, tok) }},
		{"Guard.Admit", func(g *guard.Guard, _ *guard.Keyed) error { return admitted(g.Admit(nilCtx, tok)) }},
		{"Keyed.CheckContext", func(_ *guard.Guard, k *guard.Keyed) error { return k.CheckContext(nilCtx, "/a", tok) }},
		{"Keyed.Admit", func(_ *guard.Guard, k *guard.Keyed) error { return admitted(k.Admit(nilCtx, "/a", tok)) }},
		{"Keyed.MarkContext", func(_ *guard.Guard, k *guard.Keyed) error {
			m, err := k.MarkContext(nilCtx, "/a")
			if m != 0 {
				t.Errorf("MarkContext(nil) = %d, want 0 with its error", m)
			}
			return err
		}},
	}
	for _, build := range []string{"plain", "shared store", "exclusive store", "verifier"} {
		for _, c := range calls {
			t.Run(build+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				opts := []guard.Option{guard.WithInitialMark(initial)}
				var store *countingLoads
				var v *grants
				switch build {
				case "shared store", "exclusive store":
					fs, err := markstore.NewFile(t.TempDir())
					if err != nil {
						t.Fatal(err)
					}
					store = &countingLoads{MarkStore: fs}
					opts = append(opts, guard.WithStore(store))
					if build == "exclusive store" {
						opts = append(opts, guard.WithExclusiveStore())
					}
				case "verifier":
					v = newGrants()
					v.grant("", tok)
					v.grant("/a", tok)
					opts = append(opts, guard.WithVerifier(v))
				}
				var regs []*prometheus.Registry
				withMetrics := func() []guard.Option {
					reg := prometheus.NewRegistry()
					m, err := guard.NewMetrics(reg)
					if err != nil {
						t.Fatal(err)
					}
					regs = append(regs, reg)
					return append(opts[:len(opts):len(opts)], guard.WithMetrics(m))
				}
				g, k := guard.New(withMetrics()...), guard.NewKeyed(withMetrics()...)

				err := func() (err error) {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("panicked: %v", r)
						}
					}()
					return c.call(g, k)
				}()
				if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
					t.Fatalf("error %v, want one saying nil context and wrapping primitives.ErrInvalidArgument", err)
				}

				if got := g.Mark(); got != initial {
					t.Errorf("Guard.Mark() = %d after the call, want %d", got, initial)
				}
				if n := k.Scopes(); n != 0 {
					t.Errorf("the Keyed holds %d scopes after the call, want 0", n)
				}
				if store != nil {
					if r, l := store.raises.Load(), store.loads.Load(); r+l != 0 {
						t.Errorf("the store saw %d raises and %d loads, want none", r, l)
					}
					for _, scope := range []string{"", "/a"} {
						if sm, err := store.MarkStore.Load(ctx, scope); err != nil || sm != 0 {
							t.Errorf("the stored mark of %q is %d (%v), want 0", scope, sm, err)
						}
					}
				}
				if v != nil {
					if n := v.calls.Load(); n != 0 {
						t.Errorf("the verifier was asked %d times, want never", n)
					}
				}
				for _, reg := range regs {
					for series, n := range testkit.Gather(t, reg) {
						if n != 0 && (strings.HasPrefix(series, "disco_guard_rejected_total") || strings.HasPrefix(series, "disco_guard_admitted_total")) {
							t.Errorf("%s = %v after the call, want 0: a nil context is no request", series, n)
						}
					}
				}

				// The guards still work: nothing was left locked.
				if err := g.CheckContext(ctx, tok); err != nil {
					t.Errorf("Guard.CheckContext(%d) after the call: %v", tok, err)
				}
				if err := k.CheckContext(ctx, "/a", tok); err != nil {
					t.Errorf("Keyed.CheckContext(%d) after the call: %v", tok, err)
				}
			})
		}
	}
}

// admitted returns the error of an Admit, checking that a failed Admit
// admitted nothing: no context, and a done that may be called.
func admitted(ctx context.Context, done func(), err error) error {
	if err == nil {
		done()
		return errors.New("admitted")
	}
	if ctx != nil {
		return errors.New("failed, but returned a context")
	}
	done()
	return err
}
