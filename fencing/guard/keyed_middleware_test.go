package guard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

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

// TestKeyedWrongScopeQuotesABoundedPart: a token of another scope is
// refused (403, PermissionDenied) with a message that names both scopes,
// but only the start of a huge one: the client's header is repeated
// neither whole into the response nor into the error, as a malformed
// token or scope is not.
func TestKeyedWrongScopeQuotesABoundedPart(t *testing.T) {
	k := guard.NewKeyed()
	huge := "/locks/" + strings.Repeat("x", 64<<10)
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a wrong scope reached the handler") })
	h := k.HTTPMiddleware(func(*http.Request) string { return "/locks/a" }, next)
	r := httptest.NewRequest(http.MethodPut, "/x", nil)
	fencing.InjectScopedHTTP(r, huge, 3)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Fatalf("token of another scope: %d, want 403", w.Code)
	}
	if n := w.Body.Len(); n > 512 {
		t.Errorf("403 body of %d bytes for a scope of %d bytes: %.120s...", n, len(huge), w.Body.String())
	}

	icpt := k.UnaryInterceptor(func(context.Context, string, any) string { return "/locks/a" })
	ctx := metadata.NewIncomingContext(context.Background(), fencing.ToScopedGRPCMetadata(huge, 3))
	_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
		t.Error("a wrong scope reached the handler")
		return nil, nil
	})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("token of another scope over gRPC: %v, want PermissionDenied", err)
	}
	if n := len(status.Convert(err).Message()); n > 512 {
		t.Errorf("PermissionDenied message of %d bytes for a scope of %d bytes", n, len(huge))
	}
}

// TestKeyedLongScopesQuotedInWholeRunes: a scope too long to take, and a
// token of another, long scope, are refused with messages that show the
// scope's start in whole runes (as every backend shows a long name), never
// a rune cut into escaped bytes.
func TestKeyedLongScopesQuotedInWholeRunes(t *testing.T) {
	k := guard.NewKeyed()
	long := "/" + strings.Repeat("é", 600)
	errs := map[string]error{"overlong scope": k.Check(long, 1)}
	icpt := k.UnaryInterceptor(func(context.Context, string, any) string { return "/locks/a" })
	ctx := metadata.NewIncomingContext(context.Background(), fencing.ToScopedGRPCMetadata("/"+strings.Repeat("é", 100), 3))
	_, errs["another scope"] = icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
		return nil, nil
	})
	for what, err := range errs {
		if err == nil {
			t.Fatalf("%s: accepted", what)
		}
		if msg := err.Error(); !utf8.ValidString(msg) || strings.Contains(msg, `\x`) {
			t.Errorf("%s: %s: a rune of the scope cut", what, msg)
		}
	}
}
