package store

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

func do(t *testing.T, h http.Handler, method, path, token, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set(fencing.HTTPHeader, token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestStore(t *testing.T) {
	var logged []string
	h := New().Handler(guard.New(), func(f string, args ...any) { logged = append(logged, f) })
	steps := []struct {
		method, token, body string
		code                int
	}{
		{"GET", "", "", http.StatusNotFound},
		{"PUT", "", "x", http.StatusPreconditionRequired},
		{"PUT", "abc", "x", http.StatusBadRequest},
		{"PUT", "0", "x", http.StatusBadRequest},
		{"PUT", "5", "five", http.StatusNoContent},
		{"PUT", "9", "nine", http.StatusNoContent},
		{"PUT", "9", "nine again", http.StatusNoContent},
		{"PUT", "7", "seven", http.StatusConflict},
		{"GET", "", "", http.StatusOK},
	}
	for _, s := range steps {
		rec := do(t, h, s.method, "/kv/doc", s.token, s.body)
		if rec.Code != s.code {
			t.Fatalf("%s token=%q: %d %s, want %d", s.method, s.token, rec.Code, rec.Body, s.code)
		}
		if rec.Code == http.StatusNoContent && rec.Header().Get(AppliedTokenHeader) != s.token {
			t.Errorf("PUT token=%s: %s = %q", s.token, AppliedTokenHeader, rec.Header().Get(AppliedTokenHeader))
		}
	}
	if got := do(t, h, "GET", "/kv/doc", "", "").Body.String(); got != "nine again" {
		t.Errorf("GET = %q, want %q", got, "nine again")
	}
	if len(logged) != len(steps)+1 {
		t.Errorf("logged %d requests, want %d", len(logged), len(steps)+1)
	}
}

// TestSupersededPutNotApplied: a request whose admitted context was
// cancelled by a higher token must not write.
func TestSupersededPutNotApplied(t *testing.T) {
	s := New()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("token 5 arrived: %w", fencing.ErrTokenStale))
	req := httptest.NewRequestWithContext(ctx, http.MethodPut, "/kv/k", strings.NewReader("late"))
	req.SetPathValue("key", "k")
	req.Header.Set(fencing.HTTPHeader, "3")
	rec := httptest.NewRecorder()
	s.put(rec, req)
	if rec.Code != http.StatusConflict {
		t.Fatalf("superseded PUT: %d, want 409", rec.Code)
	}
	if _, ok := s.data["k"]; ok {
		t.Fatal("superseded PUT was applied")
	}
}
