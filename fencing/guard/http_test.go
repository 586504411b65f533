package guard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

type httpFixture struct {
	g      *guard.Guard
	url    string
	client *http.Client
	ran    atomic.Int64
	// onServe, if set, runs inside the handler with the request.
	onServe func(r *http.Request)
}

func newHTTPFixture(t *testing.T, g *guard.Guard) *httpFixture {
	t.Helper()
	f := &httpFixture{g: g}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.ran.Add(1)
		if f.onServe != nil {
			f.onServe(r)
		}
		_, _ = io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(g.HTTPMiddleware(h))
	f.url = srv.URL
	f.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() {
		f.client.CloseIdleConnections()
		srv.Close()
	})
	return f
}

// do sends a request with the given token header values and returns the
// status code and body.
func (f *httpFixture) do(t *testing.T, values ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url, strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		req.Header.Add(fencing.HTTPHeader, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestHTTPMiddleware(t *testing.T) {
	g := guard.New(guard.WithInitialMark(10))
	f := newHTTPFixture(t, g)

	cases := []struct {
		name   string
		values []string
		code   int
		body   string
		ran    bool
	}{
		{"accepted", []string{"10"}, http.StatusOK, "ok", true},
		{"higher", []string{"12"}, http.StatusOK, "ok", true},
		{"stale", []string{"11"}, http.StatusConflict, "token 11 is below the mark 12", false},
		{"missing", nil, http.StatusPreconditionRequired, "missing", false},
		{"malformed", []string{"12a"}, http.StatusBadRequest, "not a decimal number", false},
		{"zero", []string{"0"}, http.StatusBadRequest, "zero", false},
		{"sign", []string{"+13"}, http.StatusBadRequest, "sign", false},
		{"two headers", []string{"13", "13"}, http.StatusBadRequest, "several values", false},
		{"comma list", []string{"13,14"}, http.StatusBadRequest, "several values", false},
		{"overflow", []string{"9223372036854775808"}, http.StatusBadRequest, "out of range", false},
	}
	for _, c := range cases {
		before := f.ran.Load()
		code, body := f.do(t, c.values...)
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("%s: got %d %q, want %d containing %q", c.name, code, body, c.code, c.body)
		}
		if ran := f.ran.Load() != before; ran != c.ran {
			t.Errorf("%s: handler ran = %t, want %t", c.name, ran, c.ran)
		}
	}
	if g.Mark() != 12 {
		t.Fatalf("mark = %d, want 12", g.Mark())
	}
	// done was called after each accepted request: a higher token is
	// admitted without waiting.
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	_, done, err := g.Admit(ctx, 20)
	if err != nil {
		t.Fatalf("Admit after HTTP requests: %v", err)
	}
	done()
}

func TestHTTPMiddlewareHandlerGetsAdmittedContext(t *testing.T) {
	g := guard.New()
	f := newHTTPFixture(t, g)
	var cause atomic.Value
	f.onServe = func(r *http.Request) {
		// A higher token arriving while the handler runs cancels the
		// handler's context: it is the admitted one.
		if err := g.Check(100); err != nil {
			t.Error(err)
		}
		select {
		case <-r.Context().Done():
			cause.Store(context.Cause(r.Context()))
		case <-time.After(patience):
			t.Error("handler context not cancelled by a higher token")
		}
	}
	if code, body := f.do(t, "5"); code != http.StatusOK {
		t.Fatalf("got %d %q", code, body)
	}
	if c, _ := cause.Load().(error); !errors.Is(c, fencing.ErrTokenStale) {
		t.Fatalf("handler context cause = %v, want ErrTokenStale", c)
	}
}

func TestHTTPMiddlewareWaitEndsWith503(t *testing.T) {
	g := guard.New()
	low, lowDone := admit(t, g, 5)
	var ran atomic.Bool
	h := g.HTTPMiddleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) }))

	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
	req.Header.Set(fencing.HTTPHeader, "6")
	rec := httptest.NewRecorder()
	finished := make(chan struct{})
	go func() {
		h.ServeHTTP(rec, req)
		close(finished)
	}()
	mustStale(t, low, "token 5")
	notYet(t, finished, "answer to token 6 before 5 is done")
	cancel()
	recv(t, finished, "answer to token 6")
	if rec.Code != http.StatusServiceUnavailable || ran.Load() {
		t.Fatalf("got %d (handler ran %t), want 503 without the handler", rec.Code, ran.Load())
	}
	lowDone()
}

// A middleware given no next handler answers every request 500, saying so,
// and admits none: the mark does not move for a request no handler
// served, and nothing panics.
func TestHTTPMiddlewareNilNext(t *testing.T) {
	g, k := guard.New(), guard.NewKeyed()
	scope := func(*http.Request) string { return "/orders" }
	for name, h := range map[string]http.Handler{
		"Guard": g.HTTPMiddleware(nil),
		"Keyed": k.HTTPMiddleware(scope, nil),
	} {
		req := httptest.NewRequest(http.MethodPut, "/orders", nil)
		fencing.InjectScopedHTTP(req, "/orders", 7)
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s.HTTPMiddleware(nil) panicked serving a request: %v", name, p)
				}
			}()
			h.ServeHTTP(rec, req)
		}()
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "nil next handler") {
			t.Errorf("%s.HTTPMiddleware(nil): %d %q, want 500 saying there is no next handler", name, rec.Code, rec.Body)
		}
	}
	if m := g.Mark(); m != 0 {
		t.Errorf("Guard's mark %d after a request no handler served, want 0", m)
	}
	if m := k.Mark("/orders"); m != 0 {
		t.Errorf("Keyed's mark %d after a request no handler served, want 0", m)
	}
}
