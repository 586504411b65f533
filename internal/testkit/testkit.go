// Package testkit holds the helpers the backends' tests share: leak checks,
// polling with a deadline, closing what a test made, and reading metrics.
package testkit

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

// NoLeaks fails t if goroutines started during the test outlive it.
func NoLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// Eventually polls cond until it holds, failing t after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// ClosedAtEnd returns a function that fails t on err and otherwise closes
// the service it is given when t ends.
func ClosedAtEnd[S interface{ Close() error }](t testing.TB) func(S, error) S {
	return func(s S, err error) S {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// Gather returns every sample of reg by its series name and labels, as
// Prometheus's text format names them (a histogram by its _count).
func Gather(t testing.TB, reg *prometheus.Registry) map[string]float64 {
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
			}
		}
	}
	return out
}

// WantSeries fails t for each series of want whose value in got differs;
// a negative want means "at least 1".
func WantSeries(t testing.TB, got, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		v, ok := got[series]
		switch {
		case w < 0 && (!ok || v < 1):
			t.Errorf("%s = %v, want at least 1", series, v)
		case w >= 0 && v != w:
			t.Errorf("%s = %v, want %v", series, v, w)
		}
	}
}
