package guard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// counting wraps a real store and counts its raises.
type counting struct {
	guard.MarkStore
	raises atomic.Int64
}

func (c *counting) Raise(ctx context.Context, scope string, t fencing.Token) error {
	c.raises.Add(1)
	return c.MarkStore.Raise(ctx, scope, t)
}

func fileStore(t testing.TB, dir string) *counting {
	t.Helper()
	s, err := markstore.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	return &counting{MarkStore: s}
}

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
// not accepted and the mark in memory is not raised.
func TestStoreFailureAdmitsNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "marks")
	k := guard.NewKeyed(guard.WithStore(fileStore(t, dir)))
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

func keyedHTTP(t *testing.T, k *guard.Keyed) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	scopeOf := func(r *http.Request) string {
		id, _ := strings.CutPrefix(r.URL.Path, "/orders/")
		if id == "" {
			return ""
		}
		return "/locks/orders/" + id
	}
	srv := httptest.NewServer(k.HTTPMiddleware(scopeOf, h))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestKeyedHTTPMiddleware(t *testing.T) {
	k := guard.NewKeyed()
	url := keyedHTTP(t, k)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	do := func(path string, headers map[string]string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+path, nil)
		for h, v := range headers {
			req.Header.Set(h, v)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	tok, scope := fencing.HTTPHeader, fencing.ScopeHTTPHeader
	cases := []struct {
		name    string
		path    string
		headers map[string]string
		want    int
	}{
		{"ok", "/orders/42", map[string]string{tok: "10", scope: "/locks/orders/42"}, 200},
		{"equal token", "/orders/42", map[string]string{tok: "10", scope: "/locks/orders/42"}, 200},
		{"older token of another lock is fine", "/orders/43", map[string]string{tok: "5", scope: "/locks/orders/43"}, 200},
		{"stale", "/orders/42", map[string]string{tok: "9", scope: "/locks/orders/42"}, 409},
		{"wrong scope", "/orders/42", map[string]string{tok: "11", scope: "/locks/orders/43"}, 403},
		{"no scope", "/orders/42", map[string]string{tok: "11"}, 428},
		{"resource names no scope", "/orders/", map[string]string{tok: "11", scope: "/locks/orders/42"}, 428},
		{"no token", "/orders/42", map[string]string{scope: "/locks/orders/42"}, 428},
		{"malformed scope", "/orders/42", map[string]string{tok: "11", scope: "%zz"}, 400},
		{"malformed token", "/orders/42", map[string]string{tok: "x", scope: "/locks/orders/42"}, 400},
	}
	for _, c := range cases {
		if got := do(c.path, c.headers); got != c.want {
			t.Errorf("%s: status %d, want %d", c.name, got, c.want)
		}
	}
	if m := k.Mark("/locks/orders/42"); m != 10 {
		t.Fatalf("mark %d: a rejected request moved it", m)
	}

	// The scoped client transport stamps what the server needs.
	client := &http.Client{Transport: fencing.NewScopedTransport(tr, func() (string, fencing.Token) { return "/locks/orders/42", 12 })}
	resp, err := client.Post(url+"/orders/42", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || k.Mark("/locks/orders/42") != 12 {
		t.Fatalf("scoped transport: status %d mark %d", resp.StatusCode, k.Mark("/locks/orders/42"))
	}
}

func TestKeyedGRPCInterceptors(t *testing.T) {
	k := guard.NewKeyed()
	lis := bufconn.Listen(1 << 20)
	scope := func(_ context.Context, method string) string { return "/locks" + method }
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(k.UnaryInterceptor(func(ctx context.Context, method string, _ any) string { return scope(ctx, method) })),
		grpc.StreamInterceptor(k.StreamInterceptor(scope)))
	srv.RegisterService(&serviceDesc, &service{started: make(chan struct{}, 1)})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(lis) })
	defer func() { srv.Stop(); wg.Wait() }()
	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(jsonCodec{}.Name())))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for name, call := range callers {
		method := unaryMethod
		if name == "stream" {
			method = streamMeth
		}
		need := "/locks" + method
		ctxWith := func(pairs ...string) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			t.Cleanup(cancel)
			return metadata.AppendToOutgoingContext(ctx, pairs...)
		}
		tk, sc := fencing.GRPCMetadataKey, fencing.ScopeGRPCMetadataKey
		cases := []struct {
			name string
			ctx  context.Context
			want codes.Code
		}{
			{"ok", ctxWith(tk, "10", sc, need), codes.OK},
			{"stale", ctxWith(tk, "9", sc, need), codes.FailedPrecondition},
			{"wrong scope", ctxWith(tk, "11", sc, "/locks/other"), codes.PermissionDenied},
			{"no scope", ctxWith(tk, "11"), codes.InvalidArgument},
			{"no token", ctxWith(sc, need), codes.InvalidArgument},
		}
		for _, c := range cases {
			_, err := call(c.ctx, cc, &msg{})
			if got := status.Code(err); got != c.want {
				t.Errorf("%s %s: code %v (%v), want %v", name, c.name, got, err, c.want)
			}
		}
		// The scoped client interceptors stamp token and scope.
		ctx := fencing.NewScopedOutgoingContext(ctxWith(), need, 12)
		if _, err := call(ctx, cc, &msg{}); err != nil {
			t.Fatalf("%s with NewScopedOutgoingContext: %v", name, err)
		}
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

// TestKeyedMiddlewareEdges: a nil scopeOf answers 428 (no scope), and a
// failing store 503 over HTTP and Unavailable over gRPC, admitting nothing.
func TestKeyedMiddlewareEdges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "marks")
	k := guard.NewKeyed(guard.WithStore(fileStore(t, dir)))
	var ran atomic.Int64
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Add(1) })
	serve := func(h http.Handler, tok fencing.Token) int {
		r := httptest.NewRequest(http.MethodPut, "/x", nil)
		fencing.InjectScopedHTTP(r, "/x", tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := serve(k.HTTPMiddleware(nil, next), 3); code != http.StatusPreconditionRequired {
		t.Fatalf("nil scopeOf: %d, want 428", code)
	}
	h := k.HTTPMiddleware(func(r *http.Request) string { return r.URL.Path }, next)
	if code := serve(h, 3); code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if code := serve(h, 4); code != http.StatusServiceUnavailable {
		t.Fatalf("failing store: %d, want 503", code)
	}
	icpt := k.UnaryInterceptor(func(context.Context, string, any) string { return "/x" })
	ctx := metadata.NewIncomingContext(context.Background(), fencing.ToScopedGRPCMetadata("/x", 5))
	_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
		ran.Add(1)
		return nil, nil
	})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("failing store over gRPC: %v, want Unavailable", err)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("handlers ran %d times, want 1", n)
	}
	if m := k.Mark("/x"); m != 3 {
		t.Fatalf("mark %d after failed raises, want 3", m)
	}
}
