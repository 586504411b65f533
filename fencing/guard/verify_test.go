package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/storetest"
)

// grants is a guard.Verifier that knows the current grants of each scope
// from a table, as a coordination service knows its holders. Its faults:
// down (every call fails), and a gate that holds every call until opened.
type grants struct {
	mu      sync.Mutex
	current map[string]fencing.Token
	down    bool
	gate    chan struct{}
	calls   atomic.Int64
	scopes  chan string // each call's scope, if not full
	entered chan struct{}
}

var errDown = errors.New("coordination service down")

func newGrants() *grants {
	return &grants{current: map[string]fencing.Token{}, scopes: make(chan string, 64), entered: make(chan struct{}, 64)}
}

func (g *grants) grant(scope string, t fencing.Token) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.current[scope] = t
}

func (g *grants) Verify(ctx context.Context, scope string, t fencing.Token) error {
	g.calls.Add(1)
	select {
	case g.scopes <- scope:
	default:
	}
	g.mu.Lock()
	gate, down, cur := g.gate, g.down, g.current[scope]
	g.mu.Unlock()
	if gate != nil {
		g.entered <- struct{}{}
		<-gate // whatever ctx says: a verifier that ignores its context
	}
	switch {
	case down:
		return errDown
	case cur != t:
		return fmt.Errorf("token %d of %q: no current grant has it: %w", t, scope, fencing.ErrTokenForged)
	}
	return nil
}

// TestVerifierConsultedOncePerRaise: a token above the mark is verified
// once; tokens at or below the mark never are; with a store and without,
// for Check and Admit, plain and keyed; the keyed guard passes the scope,
// the plain one "".
func TestVerifierConsultedOncePerRaise(t *testing.T) {
	for _, store := range []string{"none", "shared", "exclusive"} {
		t.Run(store, func(t *testing.T) {
			v := newGrants()
			opts := []guard.Option{guard.WithVerifier(v)}
			switch store {
			case "shared":
				opts = append(opts, guard.WithStore(fileStore(t, t.TempDir())))
			case "exclusive":
				opts = append(opts, guard.WithStore(fileStore(t, t.TempDir())), guard.WithExclusiveStore())
			}
			g, k := guard.New(opts...), guard.NewKeyed(opts...)
			ctx := context.Background()
			for i, c := range []struct {
				name  string
				check func(fencing.Token) error
				scope string
			}{
				{"Guard.Check", g.Check, ""},
				{"Keyed.Admit", func(tok fencing.Token) error {
					_, done, err := k.Admit(ctx, "/s", tok)
					done()
					return err
				}, "/s"},
			} {
				base := fencing.Token(10 * (i + 1))
				v.grant(c.scope, base)
				before := v.calls.Load()
				for range 20 {
					if err := c.check(base); err != nil {
						t.Fatalf("%s(%d), the current grant: %v", c.name, base, err)
					}
				}
				if err := c.check(base - 1); !errors.Is(err, fencing.ErrTokenStale) {
					t.Fatalf("%s(%d) below the mark: %v", c.name, base-1, err)
				}
				if n := v.calls.Load() - before; n != 1 {
					t.Fatalf("%s: %d verifications for 20 requests at one new token and one below, want 1", c.name, n)
				}
				if got := <-v.scopes; got != c.scope {
					t.Fatalf("%s: the verifier was asked about scope %q, want %q", c.name, got, c.scope)
				}
			}
		})
	}
}

// TestVerifierSharedByConcurrentRaises: requests that raise the mark to
// one token at once share one verification.
func TestVerifierSharedByConcurrentRaises(t *testing.T) {
	v := newGrants()
	v.grant("/s", 7)
	v.gate = make(chan struct{})
	k := guard.NewKeyed(guard.WithVerifier(v))
	first := make(chan error, 1)
	go func() { first <- k.Check("/s", 7) }()
	recv(t, v.entered, "the first verification")
	second := make(chan error, 1)
	go func() { second <- k.Check("/s", 7) }()
	notYet(t, v.entered, "a second verification of the same token")
	v.mu.Lock()
	close(v.gate)
	v.gate = nil
	v.mu.Unlock()
	for _, ch := range []chan error{first, second} {
		if err := recv(t, ch, "a request"); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.calls.Load(); n != 1 {
		t.Fatalf("%d verifications for two requests of one new token, want 1", n)
	}
}

// TestVerifierRejects: a forged token and an unverifiable one are
// rejected, with their errors, HTTP statuses, gRPC codes and metrics
// reasons, and the mark (in memory and in the store) stays; a verifier
// that hangs is bounded by the store timeout.
func TestVerifierRejects(t *testing.T) {
	v := newGrants()
	reg := prometheus.NewPedanticRegistry()
	m, err := guard.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	store := fileStore(t, t.TempDir())
	const bound = 200 * time.Millisecond
	g := guard.New(guard.WithVerifier(v), guard.WithStore(store), guard.WithMetrics(m), guard.WithStoreTimeout(bound))
	v.grant("", 5)
	if err := g.Check(5); err != nil {
		t.Fatal(err)
	}
	h := g.HTTPMiddleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a rejected request reached the handler")
	}))
	httpCode := func(tok fencing.Token) int {
		r := httptest.NewRequest(http.MethodPut, "/", nil)
		fencing.InjectHTTP(r, tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	unchanged := func(what string) {
		t.Helper()
		if mk := g.Mark(); mk != 5 {
			t.Fatalf("%s: mark %d, want 5", what, mk)
		}
		if sm, err := store.Load(context.Background(), ""); err != nil || sm != 5 {
			t.Fatalf("%s: stored mark %d, %v; want 5", what, sm, err)
		}
	}

	// Forged: a token far above every grant (one request must not brick
	// the resource).
	err = g.Check(1 << 60)
	if !errors.Is(err, fencing.ErrTokenForged) || errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("Check(1<<60): %v, want ErrTokenForged", err)
	}
	unchanged("after a forged token")
	if c := httpCode(1 << 60); c != http.StatusConflict {
		t.Errorf("HTTP status of a forged token: %d, want 409", c)
	}
	if c := status.Code(grpcCheck(t, g, 1<<60)); c != codes.FailedPrecondition {
		t.Errorf("gRPC code of a forged token: %v, want FailedPrecondition", c)
	}
	if n := storetest.Rejections(t, reg, guard.ReasonForged); n != 3 {
		t.Errorf("%v rejections with reason forged, want 3", n)
	}
	if err := g.Check(5); err != nil {
		t.Fatalf("the current holder after a forged token: %v", err)
	}

	// Unverified: the coordination service is down.
	v.mu.Lock()
	v.down = true
	v.mu.Unlock()
	v.grant("", 6)
	if err := g.Check(6); !errors.Is(err, guard.ErrUnverified) || !errors.Is(err, errDown) {
		t.Fatalf("Check(6) with the service down: %v, want ErrUnverified", err)
	}
	unchanged("after an unverified token")
	if c := httpCode(6); c != http.StatusServiceUnavailable {
		t.Errorf("HTTP status of an unverified token: %d, want 503", c)
	}
	if c := status.Code(grpcCheck(t, g, 6)); c != codes.Unavailable {
		t.Errorf("gRPC code of an unverified token: %v, want Unavailable", c)
	}
	// A verifier that does not answer: bounded by the store timeout.
	v.mu.Lock()
	v.down = false
	gate := make(chan struct{})
	v.gate = gate
	v.mu.Unlock()
	t.Cleanup(func() { close(gate) })
	err = within(t, 10*bound, "Check with a hung verifier", func() error { return g.Check(6) })
	if !errors.Is(err, guard.ErrUnverified) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Check(6) with a hung verifier: %v, want ErrUnverified and DeadlineExceeded", err)
	}
	unchanged("after a verifier that did not answer")
	if n := storetest.Rejections(t, reg, guard.ReasonUnverified); n != 4 {
		t.Errorf("%v rejections with reason unverified, want 4", n)
	}
	if err := g.Check(5); err != nil {
		t.Fatalf("the current holder while the verifier hangs: %v (tokens at the mark need no verification)", err)
	}
}

// grpcCheck passes a unary call carrying tok through g's interceptor and
// returns its error (the handler does nothing).
func grpcCheck(t *testing.T, g *guard.Guard, tok fencing.Token) error {
	t.Helper()
	ctx := metadata.NewIncomingContext(context.Background(), fencing.ToGRPCMetadata(tok))
	_, err := g.UnaryInterceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/t/T"}, func(context.Context, any) (any, error) {
		t.Error("a rejected call reached the handler")
		return nil, nil
	})
	return err
}

// TestVerifiedTokenNotVerifiedAgainBeforeItsRaise: a request of a token
// whose verification has just succeeded, arriving while that token's raise
// is still under way in the store, takes the verification as done; it
// does not ask the verifier again (one call per raise).
func TestVerifiedTokenNotVerifiedAgainBeforeItsRaise(t *testing.T) {
	v := newGrants()
	v.grant("", 7)
	store := newHanging(t)
	store.shut(true)
	g := guard.New(guard.WithVerifier(v), guard.WithStore(store))
	first := make(chan error, 1)
	go func() { first <- g.Check(7) }()
	if what := recv(t, store.entered, "the first request's raise"); what != "raise" {
		t.Fatalf("the store's %s blocked, want its raise", what)
	}
	second := make(chan error, 1)
	go func() { second <- g.Check(7) }()
	deadline := time.Now().Add(200 * time.Millisecond) // long enough for the second request to reach the verifier
	for time.Now().Before(deadline) && v.calls.Load() < 2 {
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	store.open()
	for _, ch := range []chan error{first, second} {
		if err := recv(t, ch, "a request"); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.calls.Load(); n != 1 {
		t.Fatalf("%d verifications of one token, want 1", n)
	}
}
