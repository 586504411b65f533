package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// TestOutageLogsNotEachRequest: an outage of the store (or the verifier)
// that rejects N requests of the middleware and interceptors logs a few
// lines, not N: the first rejection with its error, at most one line per
// 10 s while it lasts, and one when the store answers again, which counts
// the outage's rejections. A later outage is logged again.
func TestOutageLogsNotEachRequest(t *testing.T) {
	const n = 300
	t.Run("store", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "marks")
		store := fileStore(t, dir)
		fail := func() {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
		heal := func() {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		outage(t, n, fail, heal, guard.WithStore(store))
	})
	t.Run("verifier", func(t *testing.T) {
		v := newGrants()
		set := func(down bool) func() {
			return func() {
				v.mu.Lock()
				defer v.mu.Unlock()
				v.down = down
			}
		}
		// The token of the request once the verifier is back is current.
		v.grant("", fencing.Token(10+n))
		v.grant(fmt.Sprintf("/s%d", n), fencing.Token(10+n))
		outage(t, n, set(true), set(false), guard.WithVerifier(v))
	})
}

// outage runs an outage (fail, then heal) of n requests through the HTTP
// middleware and gRPC interceptor of a Guard and a Keyed (one scope per
// request) built with opts, and checks each one's log.
func outage(t *testing.T, n int, fail, heal func(), opts ...guard.Option) {
	t.Helper()
	type guarded struct {
		http func(tok fencing.Token, scope string) int
		grpc func(tok fencing.Token, scope string) codes.Code
	}
	serve := func(h http.Handler, tok fencing.Token, scope string) int {
		r := httptest.NewRequest(http.MethodPut, scope, nil)
		fencing.InjectScopedHTTP(r, scope, tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	call := func(icpt grpc.UnaryServerInterceptor, tok fencing.Token, scope string) codes.Code {
		ctx := metadata.NewIncomingContext(context.Background(), fencing.ToScopedGRPCMetadata(scope, tok))
		_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) { return nil, nil })
		return status.Code(err)
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for name, build := range map[string]func(...guard.Option) guarded{
		"Guard": func(opts ...guard.Option) guarded {
			g := guard.New(opts...)
			h, icpt := g.HTTPMiddleware(ok), g.UnaryInterceptor()
			return guarded{
				http: func(tok fencing.Token, _ string) int { return serve(h, tok, "/x") },
				grpc: func(tok fencing.Token, _ string) codes.Code { return call(icpt, tok, "/x") },
			}
		},
		"Keyed": func(opts ...guard.Option) guarded {
			k := guard.NewKeyed(opts...)
			h := k.HTTPMiddleware(func(r *http.Request) string { return r.URL.Path }, ok)
			icpt := k.UnaryInterceptor(func(ctx context.Context, _ string, _ any) string {
				md, _ := metadata.FromIncomingContext(ctx)
				return md.Get(fencing.ScopeGRPCMetadataKey)[0]
			})
			return guarded{
				http: func(tok fencing.Token, scope string) int { return serve(h, tok, scope) },
				grpc: func(tok fencing.Token, scope string) codes.Code { return call(icpt, tok, scope) },
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			core, logs := observer.New(zap.DebugLevel)
			g := build(append(opts, guard.WithLogger(zap.New(core)))...)
			start := time.Now()
			fail()
			for i := range n {
				tok, scope := fencing.Token(10+i), fmt.Sprintf("/s%d", i)
				if i%2 == 0 {
					if code := g.http(tok, scope); code != http.StatusServiceUnavailable {
						t.Fatalf("request %d in the outage: %d, want 503", i, code)
					}
				} else if code := g.grpc(tok, scope); code != codes.Unavailable {
					t.Fatalf("call %d in the outage: %v, want Unavailable", i, code)
				}
			}
			heal()
			if code := g.http(fencing.Token(10+n), fmt.Sprintf("/s%d", n)); code != http.StatusOK {
				t.Fatalf("a request once the outage is over: %d, want 200", code)
			}
			// One line at the start, one per 10 s of outage at most, one
			// at the end.
			entries := logs.All()
			if most := 2 + int(time.Since(start)/(10*time.Second)); len(entries) > most {
				t.Fatalf("an outage of %d rejections logged %d lines, want at most %d: %v", n, len(entries), most, entries)
			}
			if len(entries) < 2 || entries[0].Level != zap.WarnLevel || entries[0].ContextMap()["error"] == nil {
				t.Fatalf("an outage logged %v, want first a warning with the error", entries)
			}
			last := entries[len(entries)-1]
			if last.Level != zap.InfoLevel || last.ContextMap()["rejected"] != int64(n) {
				t.Fatalf("the end of an outage of %d rejections logged %s %q %v, want an Info line counting them", n, last.Level, last.Message, last.ContextMap())
			}
			fail()
			if code := g.http(fencing.Token(11+n), fmt.Sprintf("/s%d", n+1)); code != http.StatusServiceUnavailable {
				t.Fatalf("a request in a second outage: %d, want 503", code)
			}
			if again := logs.All()[len(entries):]; len(again) != 1 || again[0].Level != zap.WarnLevel {
				t.Fatalf("a second outage logged %v, want its first rejection at Warn", again)
			}
			heal()
		})
	}
}
