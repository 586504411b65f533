package e2e_test

// The test helpers of this module. They are its own: a module imports no
// other module's internal packages, the main module's test kit included.

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
)

// eventually polls cond until it holds, failing t after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// closedAtEnd returns a function that fails t on err and otherwise closes
// the service it is given when t ends.
func closedAtEnd[S interface{ Close() error }](t testing.TB) func(S, error) S {
	return func(s S, err error) S {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// nextOf returns the next event of type E on events, skipping any other,
// and fails t if events closes or none comes within d.
func nextOf[E primitives.Event](t testing.TB, events <-chan primitives.Event, d time.Duration) E {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				var zero E
				t.Fatalf("events closed before a %T", zero)
			}
			if e, ok := e.(E); ok {
				return e
			}
		case <-deadline:
			var zero E
			t.Fatalf("no %T within %v", zero, d)
		}
	}
}

// neverSuspended fails t if a Suspended event comes on events within d.
func neverSuspended(t testing.TB, events <-chan primitives.Event, d time.Duration) {
	t.Helper()
	quiet := time.After(d)
	for {
		select {
		case ev := <-events:
			if sus, ok := ev.(primitives.Suspended); ok {
				t.Fatalf("healthy session Suspended (%v of its TTL left)", time.Until(sus.Deadline))
			}
		case <-quiet:
			return
		}
	}
}

// newMetrics returns a fresh registry and disco's metrics on it.
func newMetrics(t testing.TB) (*prometheus.Registry, *metrics.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// series returns reg's counters by name and labels, and each histogram's
// count (name_count) and sum (name_sum).
func series(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := ""
			for i, lp := range mt.GetLabel() {
				if i > 0 {
					labels += ","
				}
				labels += lp.GetName() + `="` + lp.GetValue() + `"`
			}
			if labels != "" {
				labels = "{" + labels + "}"
			}
			switch {
			case mt.GetCounter() != nil:
				out[mf.GetName()+labels] = mt.GetCounter().GetValue()
			case mt.GetHistogram() != nil:
				out[mf.GetName()+"_count"+labels] = float64(mt.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+labels] = mt.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}
