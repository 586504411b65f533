package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/storetest"
	"github.com/ahrtr/disco/internal/testkit"
)

// hanging wraps a real store with a fault on the resource's side: while a
// gate is shut, the store's Load (or Raise) blocks until the gate opens,
// whatever its context says, as a store on a hung disk or a dead network
// peer does. It reports each call that blocks on entered.
type hanging struct {
	guard.MarkStore
	mu        sync.Mutex
	loadGate  chan struct{} // nil: Load passes
	raiseGate chan struct{} // nil: Raise passes
	entered   chan string
}

func newHanging(t *testing.T) *hanging {
	h := &hanging{MarkStore: fileStore(t, t.TempDir()), entered: make(chan string, 64)}
	t.Cleanup(h.open) // no call stays blocked after the test, pass or fail
	return h
}

// shut makes later Loads (raise false) or Raises (raise true) block.
func (h *hanging) shut(raise bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if raise {
		h.raiseGate = make(chan struct{})
	} else {
		h.loadGate = make(chan struct{})
	}
}

// open lets every blocked and later call through.
func (h *hanging) open() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, g := range []*chan struct{}{&h.loadGate, &h.raiseGate} {
		if *g != nil {
			close(*g)
			*g = nil
		}
	}
}

func (h *hanging) block(what string, raise bool) {
	h.mu.Lock()
	g := h.loadGate
	if raise {
		g = h.raiseGate
	}
	h.mu.Unlock()
	if g != nil {
		h.entered <- what
		<-g
	}
}

func (h *hanging) Load(ctx context.Context, scope string) (fencing.Token, error) {
	h.block("load", false)
	return h.MarkStore.Load(ctx, scope)
}

func (h *hanging) Raise(ctx context.Context, scope string, t fencing.Token) error {
	h.block("raise", true)
	return h.MarkStore.Raise(ctx, scope, t)
}

// within runs f and returns its error; it fails t if f takes longer than d.
func within(t *testing.T, d time.Duration, what string, f func() error) error {
	t.Helper()
	ch := make(chan error, 1)
	start := time.Now()
	go func() { ch <- f() }()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s still waiting after %v", what, time.Since(start).Round(time.Millisecond))
		return nil
	}
}

// mustStoreRejection fails t unless err is a store rejection that also says
// the caller's deadline passed.
func mustStoreRejection(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, guard.ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s: %v, want an error wrapping guard.ErrStore and context.DeadlineExceeded", what, err)
	}
}

func storeRejections(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return storetest.Rejections(t, reg, guard.ReasonStore)
}

// TestHungLoadBoundsOtherRequests: while one request of a scope waits for
// the store's Load, which hangs, a second request of the same scope with a
// 200 ms deadline is rejected (reason store) within a second; once the
// store answers again, the first request and later ones go through. For a
// Keyed guard and a plain Guard, with a Check (no context of its own) as the
// first request.
func TestHungLoadBoundsOtherRequests(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		name := "Guard"
		if keyed {
			name = "Keyed"
		}
		t.Run(name, func(t *testing.T) {
			store := newHanging(t)
			reg := prometheus.NewPedanticRegistry()
			m, err := guard.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			var (
				check func(fencing.Token) error
				adm   func(context.Context, fencing.Token) (context.Context, func(), error)
			)
			if keyed {
				k := guard.NewKeyed(guard.WithStore(store), guard.WithMetrics(m))
				check = func(tok fencing.Token) error { return k.Check("/s", tok) }
				adm = func(ctx context.Context, tok fencing.Token) (context.Context, func(), error) {
					return k.Admit(ctx, "/s", tok)
				}
			} else {
				g := guard.New(guard.WithStore(store), guard.WithMetrics(m))
				check = g.Check
				adm = g.Admit
			}
			store.shut(false)
			first := make(chan error, 1)
			go func() { first <- check(5) }()
			if what := recv(t, store.entered, "the first request's Load"); what != "load" {
				t.Fatalf("store call %q, want load", what)
			}

			err = within(t, time.Second, "a request with a 200 ms deadline", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				_, done, err := adm(ctx, 5)
				done()
				return err
			})
			mustStoreRejection(t, err, "Admit while another request's Load hangs")
			if n := storeRejections(t, reg); n < 1 {
				t.Fatalf("%v rejections with reason store, want at least 1", n)
			}

			store.open()
			if err := recv(t, first, "the first request"); err != nil {
				t.Fatalf("the first request, once the store answered: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			_, done, err := adm(ctx, 6)
			if err != nil {
				t.Fatalf("Admit after the store recovered: %v", err)
			}
			done()
			if err := check(4); !errors.Is(err, fencing.ErrTokenStale) {
				t.Fatalf("Check(4) below the mark 6: %v", err)
			}
		})
	}
}

// TestHungRaiseBoundedByContext: a request whose token needs a Raise of a
// store that hangs is rejected (reason store) within its deadline, and the
// mark stays where it was; after the store recovers the token goes through.
func TestHungRaiseBoundedByContext(t *testing.T) {
	store := newHanging(t)
	k := guard.NewKeyed(guard.WithStore(store))
	if err := k.Check("/s", 5); err != nil {
		t.Fatal(err)
	}
	store.shut(true)
	err := within(t, time.Second, "Admit with a 200 ms deadline on a hung Raise", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, done, err := k.Admit(ctx, "/s", 7)
		done()
		return err
	})
	mustStoreRejection(t, err, "Admit on a hung Raise")
	if m := k.Mark("/s"); m != 5 {
		t.Fatalf("mark %d after a raise that did not finish, want 5", m)
	}
	store.open()
	if err := k.Check("/s", 7); err != nil {
		t.Fatalf("Check(7) after the store recovered: %v", err)
	}
}

// TestCheckOnHungStoreReturnsWithinBound: Check, which takes no context,
// waits for a hung store at most the store timeout, and CheckContext at most
// until its context ends; both are store rejections. The HTTP middleware
// answers such a rejection 503. Once the store answers again, checks go
// through.
func TestCheckOnHungStoreReturnsWithinBound(t *testing.T) {
	for _, raise := range []bool{false, true} {
		name := "Load"
		if raise {
			name = "Raise"
		}
		t.Run(name, func(t *testing.T) {
			store := newHanging(t)
			opts := []guard.Option{guard.WithStore(store), guard.WithStoreTimeout(300 * time.Millisecond)}
			g, k := guard.New(opts...), guard.NewKeyed(opts...)
			if raise { // loaded, so that only the raise of 7 meets the store
				// Fsynced on a loaded machine, a raise can outlast the
				// timeout; one that lands late still stores the mark.
				testkit.Eventually(t, 10*time.Second, "the mark stored", func() bool { return g.Check(5) == nil })
				testkit.Eventually(t, 10*time.Second, "the keyed mark stored", func() bool { return k.Check("/s", 5) == nil })
			}
			store.shut(raise)
			ctx200 := func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			}
			for what, f := range map[string]func() error{
				"Guard.Check": func() error { return g.Check(7) },
				"Keyed.Check": func() error { return k.Check("/s", 7) },
				"Guard.CheckContext": func() error {
					ctx, cancel := ctx200()
					defer cancel()
					return g.CheckContext(ctx, 7)
				},
				"Keyed.CheckContext": func() error {
					ctx, cancel := ctx200()
					defer cancel()
					return k.CheckContext(ctx, "/s", 7)
				},
			} {
				mustStoreRejection(t, within(t, 2*time.Second, what+" on a hung store", f), what)
			}
			h := k.HTTPMiddleware(func(*http.Request) string { return "/s" }, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
				t.Error("a request reached the handler though the store did not answer")
			}))
			code := within(t, 2*time.Second, "the HTTP middleware on a hung store", func() error {
				ctx, cancel := ctx200()
				defer cancel()
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				fencing.InjectScopedHTTP(r, "/s", 7)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusServiceUnavailable {
					return fmt.Errorf("status %d (%s), want 503", w.Code, strings.TrimSpace(w.Body.String()))
				}
				return nil
			})
			if code != nil {
				t.Fatal(code)
			}

			store.open()
			if err := g.Check(7); err != nil {
				t.Fatalf("Guard.Check after the store recovered: %v", err)
			}
			if err := k.Check("/s", 7); err != nil {
				t.Fatalf("Keyed.Check after the store recovered: %v", err)
			}
		})
	}
}

// TestAbandonedLoadIsRetried: when every request waiting for a scope's Load
// gives up, a later request reads the store afresh once it answers, rather
// than inheriting the abandoned read's cancellation.
func TestAbandonedLoadIsRetried(t *testing.T) {
	store := newHanging(t)
	if err := store.Raise(context.Background(), "/s", 9); err != nil {
		t.Fatal(err)
	}
	k := guard.NewKeyed(guard.WithStore(store))
	store.shut(false)
	for range 3 {
		err := within(t, time.Second, "Admit with a 200 ms deadline", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, done, err := k.Admit(ctx, "/s", 9)
			done()
			return err
		})
		mustStoreRejection(t, err, "Admit on a hung Load")
	}
	store.open()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	m, err := k.MarkContext(ctx, "/s")
	if err != nil || m != 9 {
		t.Fatalf("MarkContext after the store recovered: %d, %v; want 9", m, err)
	}
	if err := k.Check("/s", 8); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Check(8) below the stored mark 9: %v", err)
	}
}
