// Package store is the HTTP resource of the lock examples: a tiny in-memory
// key/value store whose writes are fenced by a guard.Guard.
//
//	PUT /kv/{key}   body = value; needs a Fencing-Token header. Answers 204,
//	                or 409 (stale token), 428 (no token), 400 (malformed token).
//	GET /kv/{key}   the value, or 404. Reads change nothing and are not fenced.
//
// Both examples/lock/http/resource (a standalone server) and
// examples/lock/http/client (which starts one in-process when not given a
// -resource address) serve it.
package store

import (
	"context"
	"io"
	"net/http"
	"sync"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// AppliedTokenHeader is set on a successful PUT's response to the token that
// admitted the write.
const AppliedTokenHeader = "Applied-Fencing-Token"

// maxValue bounds a stored value.
const maxValue = 1 << 20

// Store is the key/value store. It keeps everything in memory: a real
// resource persists its data and, atomically with it, the guard's mark, and
// restores the mark after a restart with guard.WithInitialMark. Otherwise a
// restart would forget every token it has seen and let a zombie in again.
type Store struct {
	mu   sync.Mutex
	data map[string]string
}

// New returns an empty store.
func New() *Store { return &Store{data: make(map[string]string)} }

// Handler returns the store's HTTP API with writes behind g's middleware.
// logf, if not nil, is told about each request and how it ended.
func (s *Store) Handler(g *guard.Guard, logf func(format string, args ...any)) http.Handler {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /kv/{key}", g.HTTPMiddleware(http.HandlerFunc(s.put)))
	mux.HandleFunc("GET /kv/{key}", s.get)
	return logged(mux, g, logf)
}

// put runs only for admitted requests: the guard checked the token, and
// r.Context() is cancelled the moment a higher token asks to be admitted.
func (s *Store) put(w http.ResponseWriter, r *http.Request) {
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValue))
	if err != nil {
		http.Error(w, "reading the value: "+err.Error(), http.StatusBadRequest)
		return
	}
	t, _ := fencing.FromHTTP(r) // already validated by the guard
	s.mu.Lock()
	defer s.mu.Unlock()
	// Superseded while reading the body? Then a higher token is waiting and
	// this write must not happen: the guard's promise depends on it.
	if err := r.Context().Err(); err != nil {
		http.Error(w, "superseded by a higher token: "+context.Cause(r.Context()).Error(), http.StatusConflict)
		return
	}
	s.data[r.PathValue("key")] = string(value)
	w.Header().Set(AppliedTokenHeader, t.String())
	w.WriteHeader(http.StatusNoContent)
}

func (s *Store) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	v, ok := s.data[r.PathValue("key")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, v)
}

// logged reports each request's method, path, token and status to logf.
func logged(next http.Handler, g *guard.Guard, logf func(string, ...any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		token := r.Header.Get(fencing.HTTPHeader)
		next.ServeHTTP(rec, r)
		if token == "" {
			token = "none"
		}
		logf("%s %s token=%s -> %d %s (mark %d)", r.Method, r.URL.Path, token, rec.code, http.StatusText(rec.code), g.Mark())
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}
