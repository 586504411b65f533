package fencetest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives/lock"
)

// kv is the data of a test resource: one value per key, in memory, kept
// across the restarts of the handlers in front of it (it stands for a
// database).
type kv struct {
	mu sync.Mutex
	m  map[string]string
}

func newKV() *kv { return &kv{m: make(map[string]string)} }

// handler serves PUT and GET /kv/{key}; fence, if not nil, wraps PUT.
func (d *kv) handler(fence func(http.Handler) http.Handler) http.Handler {
	put := http.Handler(http.HandlerFunc(d.put))
	if fence != nil {
		put = fence(put)
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /kv/{key}", put)
	mux.HandleFunc("GET /kv/{key}", d.get)
	return mux
}

func (d *kv) put(w http.ResponseWriter, r *http.Request) {
	v, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := r.Context().Err(); err != nil { // superseded by a higher token
		http.Error(w, context.Cause(r.Context()).Error(), http.StatusConflict)
		return
	}
	d.m[r.PathValue("key")] = string(v)
	w.WriteHeader(http.StatusNoContent)
}

func (d *kv) get(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	v, ok := d.m[r.PathValue("key")]
	d.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	_, _ = io.WriteString(w, v)
}

// keyOf is the key of scope: "doc" on an unkeyed resource.
func keyOf(scope string) string { return cmp.Or(scope, "doc") }

// kvAPI is how the kit reaches a kv handler.
var kvAPI = HTTPAPI{
	Write: func(scope, value string) *http.Request {
		return httptest.NewRequest(http.MethodPut, "/kv/"+url.PathEscape(keyOf(scope)), strings.NewReader(value))
	},
	Read: func(scope string) *http.Request {
		return httptest.NewRequest(http.MethodGet, "/kv/"+url.PathEscape(keyOf(scope)), nil)
	},
}

// scopeOfPath is the scope a keyed guard in front of a kv PUT needs.
func scopeOfPath(r *http.Request) string { return r.PathValue("key") }

// row is a fenced register as examples/lock/db keeps one: the value and
// the token of the last write, checked and written together, atomically.
// policy decides, from the request's token and the row's, whether a write
// goes in. It survives restarts (it is the database), and every resource
// on it is a replica of the others.
type row struct {
	mu     sync.Mutex
	value  string
	token  fencing.Token
	policy func(t, mark fencing.Token) error
}

// fenced is the right policy: no token at or below zero, none below the
// mark.
func fenced(t, mark fencing.Token) error {
	switch {
	case t <= 0:
		return fmt.Errorf("token %d: %w", t, fencing.ErrNoToken)
	case t < mark:
		return fmt.Errorf("token %d is below %d: %w", t, mark, fencing.ErrTokenStale)
	}
	return nil
}

func (w *row) resource() Resource {
	return Resource{
		Write: func(_ context.Context, r Request) error {
			t, err := r.ParsedToken()
			if err != nil {
				return err
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if err := w.policy(t, w.token); err != nil {
				return err
			}
			w.value, w.token = r.Value, max(t, w.token)
			return nil
		},
		Read: func(context.Context, Request) (string, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.value, nil
		},
		Restart: func(context.Context) error { return nil }, // nothing in memory
	}
}

// replicated returns r with a second replica on the same row.
func (w *row) replicated() Resource {
	r := w.resource()
	two := w.resource()
	r.Replica = &two
	return r
}

// TestFencedRowPasses: a correct fenced row, with a restart and a replica,
// passes every history; the forged token bricks it (it verifies nothing).
func TestFencedRowPasses(t *testing.T) {
	w := &row{policy: fenced}
	Run(t, w.replicated())
}

// TestGuardPasses: guard.New and guard.NewKeyed in memory, through the
// HTTP middleware and as a check, pass every history but the restart, which
// they declare they do not survive.
func TestGuardPasses(t *testing.T) {
	t.Run("Guard/HTTP", func(t *testing.T) {
		data := newKV()
		r := HTTPHandler(func() http.Handler { return data.handler(guard.New().HTTPMiddleware) }, kvAPI)
		r.Restart = nil // the mark lives in memory only
		Run(t, r)
	})
	t.Run("Keyed/HTTP", func(t *testing.T) {
		data := newKV()
		r := HTTPHandler(func() http.Handler {
			k := guard.NewKeyed()
			return data.handler(func(h http.Handler) http.Handler { return k.HTTPMiddleware(scopeOfPath, h) })
		}, kvAPI)
		r.Restart, r.Keyed = nil, true
		Run(t, r)
	})
	t.Run("Guard/Check", func(t *testing.T) {
		r := Check(func() CheckFunc {
			g := guard.New(guard.WithInitialMark(0))
			return func(ctx context.Context, t fencing.Token, _ string) error { return g.CheckContext(ctx, t) }
		})
		r.Restart = nil
		Run(t, r)
	})
	t.Run("Keyed/Check", func(t *testing.T) {
		r := Check(func() CheckFunc {
			k := guard.NewKeyed()
			return func(ctx context.Context, t fencing.Token, scope string) error { return k.CheckContext(ctx, scope, t) }
		})
		r.Restart, r.Keyed = nil, true
		Run(t, r)
	})
}

// unfencedPut is a handler that forgot the fence: it stores every PUT.
func unfencedPut(h http.Handler) http.Handler { return h }

// lenientFence checks the token the way a hand-written handler often does:
// it trims and parses with base prefixes, and compares "<=" to a mark that
// starts at 0. It is fenced against stale tokens, not against bad ones.
func lenientFence() func(http.Handler) http.Handler {
	var mu sync.Mutex
	var mark int64
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var t int64
			if _, err := fmt.Sscan(r.Header.Get(fencing.HTTPHeader), &t); err != nil && r.Header.Get(fencing.HTTPHeader) != "" {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if t < mark {
				http.Error(w, "stale", http.StatusConflict)
				return
			}
			mark = t
			next.ServeHTTP(w, r)
		})
	}
}

// TestKitBites: the kit fails broken resources, in the histories that they
// break, with messages that name the history and say what a zombie did.
func TestKitBites(t *testing.T) {
	cases := []struct {
		name string
		res  func() Resource
		fail map[string][]string
		skip []string
	}{{
		name: "unfenced handler",
		res: func() Resource {
			data := newKV()
			r := HTTPHandler(func() http.Handler { return data.handler(unfencedPut) }, kvAPI)
			two := HTTPHandler(func() http.Handler { return data.handler(unfencedPut) }, kvAPI)
			r.Replica = &two
			return r
		},
		fail: map[string][]string{
			"NoToken":                {"a write with no token", "was applied", "writes unchecked"},
			"StaleWrite":             {"after A was paused and B took over, the late write of owner A with token", "a zombie overwrote the newer owner's write"},
			"StaleWriteAfterRestart": {"after a restart of the resource", "a zombie overwrote", "keeps its mark only in memory"},
			"Replicas":               {"through replica 1, which never saw token", "do not share their mark"},
			"EqualTokens":            {"concurrent late writes with the readers' token", "zombies that share a token got in together"},
			"ManyOwners":             {"not linearizable as a fenced register", "a zombie's write"},
		},
		skip: []string{"OtherScope", "IndependentScopes", "ForgedToken"},
	}, {
		name: "guard without a store, restarted",
		res: func() Resource {
			data := newKV()
			return HTTPHandler(func() http.Handler { return data.handler(guard.New().HTTPMiddleware) }, kvAPI)
		},
		fail: map[string][]string{
			"StaleWriteAfterRestart": {"after a restart of the resource, the late write of owner A", "was applied", "keeps its mark only in memory"},
		},
		skip: []string{"OtherScope", "IndependentScopes", "Replicas", "ForgedToken"},
	}, {
		name: "keyed guard without a store, restarted",
		res: func() Resource {
			data := newKV()
			r := HTTPHandler(func() http.Handler {
				k := guard.NewKeyed()
				return data.handler(func(h http.Handler) http.Handler { return k.HTTPMiddleware(scopeOfPath, h) })
			}, kvAPI)
			r.Keyed = true
			return r
		},
		fail: map[string][]string{
			"StaleWriteAfterRestart": {"after a restart of the resource", "keeps its mark only in memory"},
		},
		skip: []string{"Replicas", "ForgedToken"},
	}, {
		name: "row that lets token 0 in",
		res: func() Resource {
			w := &row{policy: func(t, mark fencing.Token) error { // "WHERE token <= ?" alone
				if t < mark {
					return fencing.ErrTokenStale
				}
				return nil
			}}
			return w.resource()
		},
		fail: map[string][]string{"NoToken": {"a write with token 0 (\"0\") on a fresh resource was applied", "holds no grant"}},
		skip: []string{"OtherScope", "IndependentScopes", "Replicas", "ForgedToken"},
	}, {
		name: "lenient parser",
		res: func() Resource {
			data := newKV()
			r := HTTPHandler(func() http.Handler { return data.handler(lenientFence()) }, kvAPI)
			r.Restart = nil
			return r
		},
		fail: map[string][]string{"NoToken": {"a write with no token", "a write with a leading zero", "a lenient parser reads it as token"}},
		skip: []string{"OtherScope", "IndependentScopes", "StaleWriteAfterRestart", "Replicas", "ForgedToken"},
	}, {
		name: "row that refuses equal tokens",
		res: func() Resource {
			w := &row{policy: func(t, mark fencing.Token) error {
				if t <= mark {
					return fencing.ErrTokenStale
				}
				return nil
			}}
			return w.resource()
		},
		fail: map[string][]string{
			"NoToken":                {"its token 1 is the mark"},
			"StaleWrite":             {"B still holds the newest grant"},
			"EqualTokens":            {"7 of 8 concurrent writes with the same token", "readers of an rwlock share one token"},
			"StaleWriteAfterRestart": {"B still holds the newest grant"},
			"ManyOwners":             {"the newest owner's write"},
		},
		skip: []string{"OtherScope", "IndependentScopes", "Replicas", "ForgedToken"},
	}, {
		name: "row that refuses stale tokens as something else",
		res: func() Resource {
			w := &row{policy: func(t, mark fencing.Token) error {
				if err := fenced(t, mark); err != nil {
					return fmt.Errorf("conflict: %w", ErrRefused)
				}
				return nil
			}}
			return w.replicated()
		},
		fail: map[string][]string{
			"StaleWrite":             {"was refused, but not as stale", "must learn that its grant is over"},
			"StaleWriteAfterRestart": {"was refused, but not as stale"},
			"Replicas":               {"was refused, but not as stale"},
		},
		skip: []string{"OtherScope", "IndependentScopes", "ForgedToken"},
	}, {
		name: "keyed resource with one mark for all scopes",
		res: func() Resource {
			data := newKV()
			r := HTTPHandler(func() http.Handler { return data.handler(guard.New().HTTPMiddleware) }, kvAPI)
			r.Restart, r.Keyed = nil, true
			return r
		},
		fail: map[string][]string{
			"OtherScope":        {"carrying a token of scope", "writes into another lock's resource"},
			"IndependentScopes": {"locks the holder of one lock out whenever another lock has a newer grant"},
		},
		skip: []string{"StaleWriteAfterRestart", "Replicas", "ForgedToken"},
	}, {
		name: "keyed resource that ignores the token's scope",
		res: func() Resource {
			data := newKV()
			k := guard.NewKeyed()
			fence := func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					t, err := fencing.FromHTTP(r)
					ctx, done := r.Context(), func() {}
					if err == nil {
						// The scope header is never read. Admit, not Check:
						// a higher token waits for lower ones in flight, so
						// that only the scope is wrong here.
						ctx, done, err = k.Admit(r.Context(), scopeOfPath(r), t)
					}
					if err != nil {
						http.Error(w, err.Error(), http.StatusConflict)
						return
					}
					defer done()
					next.ServeHTTP(w, r.WithContext(ctx))
				})
			}
			r := HTTPHandler(func() http.Handler { return data.handler(fence) }, kvAPI)
			r.Restart, r.Keyed = nil, true
			return r
		},
		fail: map[string][]string{
			"OtherScope": {"carrying a token of scope", "carrying token", "without its scope was applied"},
		},
		skip: []string{"StaleWriteAfterRestart", "Replicas", "ForgedToken"},
	}, {
		name: "replicas with a mark each",
		res: func() Resource {
			data := newKV()
			one := HTTPHandler(func() http.Handler { return data.handler(guard.New().HTTPMiddleware) }, kvAPI)
			two := HTTPHandler(func() http.Handler { return data.handler(guard.New().HTTPMiddleware) }, kvAPI)
			one.Restart, one.Replica = nil, &two
			return one
		},
		fail: map[string][]string{
			"Replicas": {"through replica 1, which never saw token", "after replica 1 accepted", "do not share their mark"},
		},
		skip: []string{"OtherScope", "IndependentScopes", "StaleWriteAfterRestart", "ForgedToken"},
	}, {
		name: "resource that claims to verify and does not",
		res: func() Resource {
			w := &row{policy: fenced}
			r := w.resource()
			var last fencing.Token
			r.Verifies = true
			r.Grant = func(context.Context, string) (fencing.Token, error) { last++; return last, nil }
			return r
		},
		fail: map[string][]string{
			"ForgedToken": {"far above any grant, was applied although the resource verifies tokens", "locks every legitimate owner out"},
		},
		skip: []string{"OtherScope", "IndependentScopes", "Replicas"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			expect(t, runRecorded(t, c.res(), ""), c.fail, c.skip...)
		})
	}
}

// TestForgedTokenReport: a resource that does not verify tokens is shown
// bricked by one forged token, by name, and the history is skipped, not
// failed.
func TestForgedTokenReport(t *testing.T) {
	w := &row{policy: fenced}
	got := runRecorded(t, w.resource(), "ForgedToken")
	v := got["ForgedToken"]
	if v.status != "SKIP" {
		t.Fatalf("ForgedToken: %s, want SKIP:\n%s", v.status, v.logs)
	}
	for _, want := range []string{"ForgedToken: NOT PROTECTED", "does not verify tokens", "refused the next legitimate owner", "bricks it"} {
		if !strings.Contains(v.logs, want) {
			t.Errorf("ForgedToken's report lacks %q:\n%s", want, v.logs)
		}
	}
}

// TestBadResource: a Resource without Write or Read, or one that verifies
// without Grant, fails at once with a message that says what it lacks.
func TestBadResource(t *testing.T) {
	for _, c := range []struct {
		res  Resource
		want string
	}{
		{Resource{Read: (&row{}).resource().Read}, "lacks Write"},
		{Resource{Write: (&row{}).resource().Write}, "lacks Read"},
		{Resource{Write: (&row{}).resource().Write, Read: (&row{}).resource().Read, Verifies: true}, "Verifies tokens but has no Grant"},
	} {
		rec := newRecorder(t, t.Name())
		done := make(chan struct{})
		go func() {
			defer close(done)
			run(rec, c.res)
		}()
		<-done
		if !rec.Failed() || len(rec.subs) != 0 || !strings.Contains(strings.Join(rec.logs, "\n"), c.want) {
			t.Errorf("Run on a Resource that %s: failed %v, %d histories run, logged %q", c.want, rec.Failed(), len(rec.subs), rec.logs)
		}
	}
}

// grants issues real tokens from memio locks, one lock per scope: each
// Grant unlocks the scope's previous grant and locks again.
type grants struct {
	st   *memio.Store
	mu   sync.Mutex
	held map[string]lock.Service
}

// lockName is the name of the lock behind an unkeyed resource's tokens.
const lockName = "/fencetest/lock"

func newGrants(t *testing.T) *grants {
	gs := &grants{st: memio.NewStore(), held: make(map[string]lock.Service)}
	t.Cleanup(func() {
		for _, l := range gs.held {
			_ = l.Close()
		}
	})
	return gs
}

func (gs *grants) grant(ctx context.Context, scope string) (fencing.Token, error) {
	name := cmp.Or(scope, lockName)
	gs.mu.Lock()
	defer gs.mu.Unlock()
	l := gs.held[name]
	if l == nil {
		var err error
		if l, err = memio.NewLock(gs.st, name); err != nil {
			return 0, err
		}
		gs.held[name] = l
	} else if err := l.Unlock(ctx); err != nil {
		return 0, err
	}
	g, err := l.Lock(ctx)
	if err != nil {
		return 0, err
	}
	return g.Token(), nil
}

// TestVerifyingResource: a resource whose guard verifies tokens with a memio
// Verifier (guard.WithVerifier) before it raises its mark refuses a forged
// token and keeps its mark; the kit's tokens come from real memio locks.
func TestVerifyingResource(t *testing.T) {
	t.Run("Guard", func(t *testing.T) {
		gs := newGrants(t)
		v, err := memio.NewVerifier(gs.st, "lock", lockName)
		if err != nil {
			t.Fatal(err)
		}
		data := newKV()
		r := HTTPHandler(func() http.Handler {
			return data.handler(guard.New(guard.WithVerifier(v)).HTTPMiddleware)
		}, kvAPI)
		r.Restart, r.Verifies, r.Grant = nil, true, gs.grant
		Run(t, r)
	})
	t.Run("Keyed", func(t *testing.T) {
		gs := newGrants(t)
		v, err := memio.NewVerifier(gs.st, "lock", "")
		if err != nil {
			t.Fatal(err)
		}
		data := newKV()
		r := HTTPHandler(func() http.Handler {
			k := guard.NewKeyed(guard.WithVerifier(v))
			return data.handler(func(h http.Handler) http.Handler { return k.HTTPMiddleware(scopeOfPath, h) })
		}, kvAPI)
		r.Restart, r.Keyed, r.Verifies, r.Grant = nil, true, true, gs.grant
		Run(t, r)
	})
}
