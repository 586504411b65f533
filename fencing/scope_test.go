package fencing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/fencing"
)

func TestScopeEncodingRoundTrip(t *testing.T) {
	for _, s := range []string{"/locks/orders/42", "a b", "100%", "ünïcode/键", "\x00\x7f\xff", "x"} {
		w := fencing.EncodeScope(s)
		for i := 0; i < len(w); i++ {
			if w[i] <= ' ' || w[i] >= 0x7f {
				t.Fatalf("EncodeScope(%q) = %q holds byte %#x", s, w, w[i])
			}
		}
		got, err := fencing.DecodeScope(w)
		if err != nil || got != s {
			t.Fatalf("DecodeScope(EncodeScope(%q)) = %q, %v", s, got, err)
		}
	}
	if w := fencing.EncodeScope("/locks/orders/42"); w != "/locks/orders/42" {
		t.Fatalf("a plain prefix changed on the wire: %q", w)
	}
	for _, bad := range []string{"%", "%4", "%zz", "a b", "%4g"} {
		if _, err := fencing.DecodeScope(bad); !errors.Is(err, fencing.ErrMalformedScope) || !errors.Is(err, fencing.ErrMalformedToken) {
			t.Errorf("DecodeScope(%q): %v, want ErrMalformedScope", bad, err)
		}
	}
}

func TestScopedHTTP(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	if _, err := fencing.ScopeFromHTTP(req); !errors.Is(err, fencing.ErrNoScope) || !errors.Is(err, fencing.ErrNoToken) || errors.Is(err, fencing.ErrMalformedToken) {
		t.Fatalf("missing scope: %v", err)
	}
	fencing.InjectScopedHTTP(req, "/locks/a b", 9)
	if got := req.Header.Get(fencing.ScopeHTTPHeader); got != "/locks/a%20b" {
		t.Fatalf("scope header %q", got)
	}
	if s, err := fencing.ScopeFromHTTP(req); err != nil || s != "/locks/a b" {
		t.Fatalf("ScopeFromHTTP = %q, %v", s, err)
	}
	if tok, err := fencing.FromHTTP(req); err != nil || tok != 9 {
		t.Fatalf("FromHTTP = %d, %v", tok, err)
	}
	req.Header.Add(fencing.ScopeHTTPHeader, "/other")
	if _, err := fencing.ScopeFromHTTP(req); !errors.Is(err, fencing.ErrMalformedScope) {
		t.Fatalf("two scopes: %v", err)
	}
	fencing.InjectScopedHTTP(req, "", 10) // unscoped
	if _, ok := req.Header[fencing.ScopeHTTPHeader]; ok {
		t.Fatal("empty scope left a scope header")
	}
	fencing.InjectScopedHTTP(req, "/x", 0)
	if len(req.Header) != 0 {
		t.Fatalf("no token left headers %v", req.Header)
	}
	if _, err := fencing.ScopeFromHTTP(nil); !errors.Is(err, fencing.ErrNoScope) {
		t.Fatalf("nil request: %v", err)
	}
}

func TestScopedGRPCMetadata(t *testing.T) {
	md := fencing.ToScopedGRPCMetadata("/locks/ü", 5)
	if s, err := fencing.ScopeFromGRPCMetadata(md); err != nil || s != "/locks/ü" {
		t.Fatalf("scope %q, %v", s, err)
	}
	if len(fencing.ToScopedGRPCMetadata("/x", 0)) != 0 {
		t.Fatal("metadata without a token")
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "other", "x", fencing.ScopeGRPCMetadataKey, "/old")
	ctx = fencing.NewScopedOutgoingContext(ctx, "/new", 3)
	out, _ := metadata.FromOutgoingContext(ctx)
	if got := out.Get(fencing.ScopeGRPCMetadataKey); len(got) != 1 || got[0] != "/new" {
		t.Fatalf("scope %q", got)
	}
	if len(out.Get("other")) != 1 || len(out.Get(fencing.GRPCMetadataKey)) != 1 {
		t.Fatalf("metadata %v", out)
	}
	in := metadata.NewIncomingContext(context.Background(), out)
	if s, err := fencing.ScopeFromIncomingContext(in); err != nil || s != "/new" {
		t.Fatalf("incoming scope %q, %v", s, err)
	}
	ctx = fencing.NewScopedOutgoingContext(ctx, "", 4)
	out, _ = metadata.FromOutgoingContext(ctx)
	if len(out.Get(fencing.ScopeGRPCMetadataKey)) != 0 {
		t.Fatal("empty scope kept the old one")
	}
	if _, err := fencing.ScopeFromIncomingContext(context.Background()); !errors.Is(err, fencing.ErrNoScope) {
		t.Fatalf("no metadata: %v", err)
	}
}

func TestScopedTransport(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, _ := fencing.ScopeFromHTTP(r)
		tok, _ := fencing.FromHTTP(r)
		mu.Lock()
		seen = append(seen, s+"@"+tok.String())
		mu.Unlock()
	}))
	base := &http.Transport{}
	defer srv.Close()
	defer base.CloseIdleConnections()
	var tok atomic.Int64
	client := &http.Client{Transport: fencing.NewScopedTransport(base, func() (string, fencing.Token) {
		return "/locks/7", fencing.Token(tok.Load())
	})}
	if _, err := client.Get(srv.URL); !errors.Is(err, fencing.ErrNoToken) {
		t.Fatalf("no token: %v", err)
	}
	tok.Store(8)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set(fencing.ScopeHTTPHeader, "/forged")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(seen) != 1 || seen[0] != "/locks/7@8" {
		t.Fatalf("server saw %q", seen)
	}
}

func TestScopedClientInterceptors(t *testing.T) {
	var tok atomic.Int64
	src := func() (string, fencing.Token) { return "/locks/9", fencing.Token(tok.Load()) }
	var sent metadata.MD
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil, nil
	}
	u := fencing.ScopedUnaryClientInterceptor(src)
	s := fencing.ScopedStreamClientInterceptor(src)
	if err := u(context.Background(), "/svc/M", nil, nil, nil, invoker); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("unary without token: %v", err)
	}
	if _, err := s(context.Background(), &grpc.StreamDesc{}, nil, "/svc/S", streamer); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("stream without token: %v", err)
	}
	tok.Store(5)
	for _, call := range []func() error{
		func() error { return u(context.Background(), "/svc/M", nil, nil, nil, invoker) },
		func() error {
			_, err := s(context.Background(), &grpc.StreamDesc{}, nil, "/svc/S", streamer)
			return err
		},
	} {
		sent = nil
		if err := call(); err != nil {
			t.Fatal(err)
		}
		if sc, err := fencing.ScopeFromGRPCMetadata(sent); err != nil || sc != "/locks/9" {
			t.Fatalf("sent scope %q, %v", sc, err)
		}
		if tk, err := fencing.FromGRPCMetadata(sent); err != nil || tk != 5 {
			t.Fatalf("sent token %d, %v", tk, err)
		}
	}
}

// FuzzScope: every scope survives the wire, its wire form is a valid header
// value, and DecodeScope never panics on any input.
func FuzzScope(f *testing.F) {
	for _, s := range []string{"/locks/a", "%", "%41", "a b", "\x00", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w := fencing.EncodeScope(s)
		got, err := fencing.DecodeScope(w)
		if err != nil || got != s {
			t.Fatalf("round trip of %q: %q, %v", s, got, err)
		}
		for i := 0; i < len(w); i++ {
			if w[i] <= ' ' || w[i] >= 0x7f {
				t.Fatalf("wire form %q of %q holds byte %#x", w, s, w[i])
			}
		}
		_, _ = fencing.DecodeScope(s)
	})
}

// InjectScopedHTTP clears every spelling of the scope header, as
// InjectHTTP does the token's: a hand-filled header map with a lower-cased
// scope sent two scopes (a keyed guard answered 400), or, with a token <=
// 0, still sent the old scope.
func TestInjectScopedHTTPClearsEverySpelling(t *testing.T) {
	for _, tc := range []struct {
		tok  fencing.Token
		want []string
	}{{7, []string{"/locks/new"}}, {0, nil}} {
		req, err := http.NewRequest("GET", "http://example.invalid/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header["fencing-token"] = []string{"3"}
		req.Header["fencing-scope"] = []string{"/locks/old"}
		fencing.InjectScopedHTTP(req, "/locks/new", tc.tok)
		var got []string
		for k, vs := range req.Header {
			if strings.EqualFold(k, fencing.ScopeHTTPHeader) {
				for _, v := range vs {
					s, err := fencing.DecodeScope(v)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, s)
				}
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("InjectScopedHTTP(req, /locks/new, %d) over a lower-cased scope: scopes %q, want %q", tc.tok, got, tc.want)
		}
	}
}

// ScopeFromGRPCMetadata looks its key up as FromGRPCMetadata does its
// own, case-insensitively: a hand-built metadata's scope was missed where
// its token was found.
func TestScopeFromGRPCMetadataAnyCase(t *testing.T) {
	md := metadata.MD{"Fencing-Token": {"5"}, "Fencing-Scope": {fencing.EncodeScope("/locks/a")}}
	if tok, err := fencing.FromGRPCMetadata(md); err != nil || tok != 5 {
		t.Fatalf("FromGRPCMetadata: %d, %v", tok, err)
	}
	if s, err := fencing.ScopeFromGRPCMetadata(md); err != nil || s != "/locks/a" {
		t.Errorf("ScopeFromGRPCMetadata(%v) = %q, %v; want /locks/a", md, s, err)
	}
}
