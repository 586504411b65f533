package fencing_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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

// recorder is a test server that records the token headers it receives.
type recorder struct {
	mu   sync.Mutex
	seen [][]string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	rec.mu.Lock()
	rec.seen = append(rec.seen, r.Header.Values(fencing.HTTPHeader))
	rec.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rec *recorder) requests() [][]string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([][]string(nil), rec.seen...)
}

func newClient(t *testing.T, src fencing.TokenSource) (*http.Client, *recorder, string) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	base := &http.Transport{}
	client := &http.Client{Transport: fencing.NewTransport(base, src)}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
	})
	return client, rec, srv.URL
}

func TestTransportStampsToken(t *testing.T) {
	var tok atomic.Int64
	tok.Store(41)
	client, rec, url := newClient(t, func() fencing.Token { return fencing.Token(tok.Load()) })

	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(fencing.HTTPHeader, "3") // a stale value set by hand is replaced
	req.Header.Set("X-Other", "kept")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// The caller's request is not modified.
	if got := req.Header.Values(fencing.HTTPHeader); len(got) != 1 || got[0] != "3" {
		t.Fatalf("caller's request header changed to %q", got)
	}

	tok.Store(42)
	req2, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err = client.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, ok := req2.Header[fencing.HTTPHeader]; ok {
		t.Fatal("caller's request got a token header")
	}

	got := rec.requests()
	if len(got) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(got))
	}
	if len(got[0]) != 1 || got[0][0] != "41" || len(got[1]) != 1 || got[1][0] != "42" {
		t.Fatalf("server saw tokens %q, want [[41] [42]]", got)
	}
}

// closeRecorder is a request body that records Close.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

func TestTransportRefusesWithoutToken(t *testing.T) {
	for name, src := range map[string]fencing.TokenSource{
		"zero":     func() fencing.Token { return 0 },
		"negative": func() fencing.Token { return -1 },
		"nil":      nil,
	} {
		t.Run(name, func(t *testing.T) {
			client, rec, url := newClient(t, src)
			body := &closeRecorder{Reader: strings.NewReader("payload")}
			req, err := http.NewRequest(http.MethodPost, url, body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatal("request without a token was sent")
			}
			if !errors.Is(err, fencing.ErrNoToken) {
				t.Fatalf("error %v does not wrap ErrNoToken", err)
			}
			if n := len(rec.requests()); n != 0 {
				t.Fatalf("server reached %d times", n)
			}
			if !body.closed.Load() {
				t.Fatal("request body not closed")
			}
		})
	}
}

func TestTransportNilBaseUsesDefault(t *testing.T) {
	rt := fencing.NewTransport(nil, func() fencing.Token { return 0 })
	if rt == nil {
		t.Fatal("nil RoundTripper")
	}
	req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/", nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, fencing.ErrNoToken) {
		t.Fatalf("error %v does not wrap ErrNoToken", err)
	}
}

func TestUnaryClientInterceptor(t *testing.T) {
	var tok atomic.Int64
	icpt := fencing.UnaryClientInterceptor(func() fencing.Token { return fencing.Token(tok.Load()) })
	var calls int
	var sent metadata.MD
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		calls++
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "other", "x", fencing.GRPCMetadataKey, "1")

	err := icpt(ctx, "/svc/M", nil, nil, nil, invoker)
	if !errors.Is(err, fencing.ErrNoToken) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("error %v (code %v), want ErrNoToken and FailedPrecondition", err, status.Code(err))
	}
	if calls != 0 {
		t.Fatal("invoker called without a token")
	}

	tok.Store(12)
	if err := icpt(ctx, "/svc/M", nil, nil, nil, invoker); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("invoker called %d times", calls)
	}
	if got := sent.Get(fencing.GRPCMetadataKey); len(got) != 1 || got[0] != "12" {
		t.Fatalf("sent token %q, want [12]", got)
	}
	if got := sent.Get("other"); len(got) != 1 {
		t.Fatalf("other metadata lost: %v", sent)
	}
}

func TestStreamClientInterceptor(t *testing.T) {
	var tok atomic.Int64
	icpt := fencing.StreamClientInterceptor(func() fencing.Token { return fencing.Token(tok.Load()) })
	var calls int
	var sent metadata.MD
	streamer := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		calls++
		sent, _ = metadata.FromOutgoingContext(ctx)
		return nil, nil
	}
	_, err := icpt(context.Background(), &grpc.StreamDesc{}, nil, "/svc/S", streamer)
	if !errors.Is(err, fencing.ErrNoToken) || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("error %v (code %v), want ErrNoToken and FailedPrecondition", err, status.Code(err))
	}
	if calls != 0 {
		t.Fatal("streamer called without a token")
	}
	tok.Store(77)
	if _, err := icpt(context.Background(), &grpc.StreamDesc{}, nil, "/svc/S", streamer); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("streamer called %d times", calls)
	}
	if got := sent.Get(fencing.GRPCMetadataKey); len(got) != 1 || got[0] != "77" {
		t.Fatalf("sent token %q, want [77]", got)
	}
}
