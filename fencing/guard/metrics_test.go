package guard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/primitives"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := guard.NewMetrics(reg, guard.WithScopeLabels())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard.NewMetrics(reg); err == nil {
		t.Fatal("a second NewMetrics on one registry succeeded")
	}
	if _, err := guard.NewMetrics(nil); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("NewMetrics(nil): %v, want an error wrapping primitives.ErrInvalidArgument", err)
	}
	k := guard.NewKeyed(guard.WithMetrics(m))
	ctx := context.Background()
	_ = k.Check("/a", 5)                                   // admitted
	_ = k.Check("/a", 5)                                   // admitted
	_ = k.Check("/b", 9)                                   // admitted
	_ = k.Check("/a", 4)                                   // stale
	if _, done, err := k.Admit(ctx, "/a", 6); err == nil { // admitted, waited
		done()
	}
	_ = k.Check("", 6) // missing (no scope)
	h := k.HTTPMiddleware(func(*http.Request) string { return "/a" }, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, hdr := range []map[string]string{
		{fencing.HTTPHeader: "7", fencing.ScopeHTTPHeader: "/b"}, // wrong scope
		{fencing.HTTPHeader: "x", fencing.ScopeHTTPHeader: "/a"}, // malformed
		{fencing.ScopeHTTPHeader: "/a"},                          // missing
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	want := `
# HELP disco_guard_admitted_total Tokens accepted by Check or admitted by Admit.
# TYPE disco_guard_admitted_total counter
disco_guard_admitted_total 4
# HELP disco_guard_rejected_total Requests refused, by reason: missing, malformed, stale, wrong_scope, store, canceled, forged, unverified.
# TYPE disco_guard_rejected_total counter
disco_guard_rejected_total{reason="canceled"} 0
disco_guard_rejected_total{reason="forged"} 0
disco_guard_rejected_total{reason="malformed"} 1
disco_guard_rejected_total{reason="missing"} 2
disco_guard_rejected_total{reason="stale"} 1
disco_guard_rejected_total{reason="store"} 0
disco_guard_rejected_total{reason="unverified"} 0
disco_guard_rejected_total{reason="wrong_scope"} 1
# HELP disco_guard_mark The highest mark of the guard (any scope).
# TYPE disco_guard_mark gauge
disco_guard_mark 9
# HELP disco_guard_scope_mark The mark of each scope.
# TYPE disco_guard_scope_mark gauge
disco_guard_scope_mark{scope="/a"} 6
disco_guard_scope_mark{scope="/b"} 9
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "disco_guard_admitted_total", "disco_guard_rejected_total", "disco_guard_mark", "disco_guard_scope_mark"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "disco_guard_admit_wait_seconds"); n != 1 {
		t.Errorf("admit wait series: %d", n)
	}

	// A plain Guard without scope labels: no per-scope series.
	reg2 := prometheus.NewPedanticRegistry()
	m2, err := guard.NewMetrics(reg2)
	if err != nil {
		t.Fatal(err)
	}
	g := guard.New(guard.WithMetrics(m2))
	_ = g.Check(300)
	if err := g.Check(2); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatal(err)
	}
	if err := g.Check(299); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg2, "disco_guard_scope_mark"); n != 0 {
		t.Errorf("%d per-scope series without WithScopeLabels", n)
	}
	// Each stale rejection is seen with its distance below the mark: a near
	// miss (299 at mark 300) and a zombie far behind (2).
	if err := testutil.GatherAndCompare(reg2, strings.NewReader(`
# HELP disco_guard_mark The highest mark of the guard (any scope).
# TYPE disco_guard_mark gauge
disco_guard_mark 300
# HELP disco_guard_stale_distance How far below the mark (in tokens) each token rejected as stale was.
# TYPE disco_guard_stale_distance histogram
disco_guard_stale_distance_bucket{le="1"} 1
disco_guard_stale_distance_bucket{le="4"} 1
disco_guard_stale_distance_bucket{le="16"} 1
disco_guard_stale_distance_bucket{le="64"} 1
disco_guard_stale_distance_bucket{le="256"} 1
disco_guard_stale_distance_bucket{le="1024"} 2
disco_guard_stale_distance_bucket{le="4096"} 2
disco_guard_stale_distance_bucket{le="16384"} 2
disco_guard_stale_distance_bucket{le="65536"} 2
disco_guard_stale_distance_bucket{le="262144"} 2
disco_guard_stale_distance_bucket{le="1.048576e+06"} 2
disco_guard_stale_distance_bucket{le="4.194304e+06"} 2
disco_guard_stale_distance_bucket{le="+Inf"} 2
disco_guard_stale_distance_sum 299
disco_guard_stale_distance_count 2
`), "disco_guard_mark", "disco_guard_stale_distance"); err != nil {
		t.Error(err)
	}
}

// TestMetricsMarkIsTheEnforcedMark: disco_guard_mark (and a scope's mark)
// is the mark the guard enforces, however it rose: learnt from a shared
// store, or set by WithInitialMark, as well as by a token it accepted. It
// followed only the accepted tokens: a replica rejecting token 5 as below
// the store's mark 10 reported 0.
func TestMetricsMarkIsTheEnforcedMark(t *testing.T) {
	st, err := markstore.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.New(guard.WithStore(st)).Check(10); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what  string
		opts  []guard.Option
		stale fencing.Token
	}{
		{"a replica on the store", []guard.Option{guard.WithStore(st)}, 5},
		{"a guard WithInitialMark(100)", []guard.Option{guard.WithInitialMark(100)}, 50},
	} {
		reg := prometheus.NewPedanticRegistry()
		m, err := guard.NewMetrics(reg, guard.WithScopeLabels())
		if err != nil {
			t.Fatal(err)
		}
		g := guard.New(append(tc.opts, guard.WithMetrics(m))...)
		if err := g.Check(tc.stale); !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("%s: Check(%d): %v, want stale", tc.what, tc.stale, err)
		}
		want := fmt.Sprintf(`
# HELP disco_guard_mark The highest mark of the guard (any scope).
# TYPE disco_guard_mark gauge
disco_guard_mark %d
`, g.Mark())
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "disco_guard_mark"); err != nil {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
}
