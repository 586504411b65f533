// Package testkit holds the helpers the backends' tests share: leak checks,
// polling with a deadline, closing what a test made, and reading metrics.
package testkit

import (
	"context"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
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

// NewMetrics returns a fresh registry and disco's metrics on it, for a
// test that reads what a backend reported (Gather).
func NewMetrics(t testing.TB) (*prometheus.Registry, *metrics.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
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

// Herd is a herd count's shape: Owners, each on its own session (open
// makes one), loop Acquire and Release on one semaphore until Total
// acquisitions are made; the wakeups (disco_wakeups_total{kind="semaphore"},
// every owner reporting to one registry) are counted from the Warm-th
// acquisition to the Total-th.
type Herd struct{ Owners, Warm, Total int }

// WakeupsPerAcquisition runs h on the owners open makes, each given the
// metrics of one registry, and returns the wakeups per acquisition, and
// every series of the registry at the end: a release that wakes only the
// waiter it admits keeps the figure a small constant, whatever the number
// of owners.
func WakeupsPerAcquisition(t *testing.T, h Herd, open func(*metrics.Metrics) (semaphore.Service, error)) (float64, map[string]float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	sems := make([]semaphore.Service, h.Owners)
	for i := range sems {
		sems[i] = ClosedAtEnd[semaphore.Service](t)(open(m))
	}
	wakeups := func() float64 { return Gather(t, reg)[`disco_wakeups_total{kind="semaphore"}`] }
	var acquired atomic.Int64
	var from, to atomic.Uint64 // math.Float64bits of the wakeups at Warm and at Total
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for _, s := range sems {
		wg.Go(func() {
			for ctx.Err() == nil {
				g, err := s.Acquire(ctx)
				if err != nil {
					return // the last waiters, once the count is reached
				}
				switch int(acquired.Add(1)) {
				case h.Warm:
					from.Store(math.Float64bits(wakeups()))
				case h.Total:
					to.Store(math.Float64bits(wakeups()))
				}
				if err := s.Release(context.WithoutCancel(ctx), g); err != nil {
					t.Error(err)
				}
				if int(acquired.Load()) >= h.Total {
					return
				}
			}
		})
	}
	Eventually(t, 60*time.Second, "every acquisition", func() bool { return int(acquired.Load()) >= h.Total })
	stop() // the owners still waiting give up: the count is taken
	wg.Wait()
	per := (math.Float64frombits(to.Load()) - math.Float64frombits(from.Load())) / float64(h.Total-h.Warm)
	return per, Gather(t, reg)
}

// SilentEndpoint returns the address of a listener that accepts
// connections and never answers (a store that is up but does not
// respond), and a channel closed at its first connection. It is closed
// when t ends.
func SilentEndpoint(t testing.TB) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if conns = append(conns, c); len(conns) == 1 {
				close(first)
			}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), first
}

// NextOf returns the next event of type E on events, skipping any other,
// and fails t if events closes or none comes within d.
func NextOf[E primitives.Event](t testing.TB, events <-chan primitives.Event, d time.Duration) E {
	t.Helper()
	return NextWhere(t, events, d, func(E) bool { return true })
}

// NextWhere returns the next event of type E on events for which match is
// true, skipping any other, and fails t if events closes or none comes
// within d.
func NextWhere[E primitives.Event](t testing.TB, events <-chan primitives.Event, d time.Duration, match func(E) bool) E {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				var zero E
				t.Fatalf("events closed before a %T", zero)
			}
			if e, ok := e.(E); ok && match(e) {
				return e
			}
		case <-deadline:
			var zero E
			t.Fatalf("no %T within %v", zero, d)
		}
	}
}

// NeverSuspended fails t if a Suspended event comes on events within d:
// a healthy session's renewals go often enough for its suspension point.
func NeverSuspended(t testing.TB, events <-chan primitives.Event, d time.Duration) {
	t.Helper()
	quiet := time.After(d)
	for {
		select {
		case ev := <-events:
			if sus, ok := ev.(primitives.Suspended); ok {
				t.Fatalf("healthy session Suspended (%v of its TTL left): renewals go less often than WithSuspendAfter allows",
					time.Until(sus.Deadline))
			}
		case <-quiet:
			return
		}
	}
}
