package main

import (
	"math"
	"slices"
	"sync"
	"time"
)

// dist summarises latencies, in milliseconds.
type dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize sorts samples in place and summarises them.
func summarize(samples []time.Duration) dist {
	if len(samples) == 0 {
		return dist{}
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		return ms(samples[max(i, 0)])
	}
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return dist{N: len(samples), Mean: ms(sum / time.Duration(len(samples))),
		P50: q(0.50), P90: q(0.90), P99: q(0.99), P999: q(0.999), Max: ms(samples[len(samples)-1])}
}

// side is what one implementation did in one scenario.
type side struct {
	Lib      string        `json:"lib"`
	Count    int           `json:"count"` // acquisitions (or operations) in the window
	Window   time.Duration `json:"window_ns"`
	PerSec   float64       `json:"per_sec"`
	Handoff  dist          `json:"handoff"`             // previous holder calls Unlock -> next Lock returns
	HandoffR dist          `json:"handoff_from_return"` // previous holder's Unlock returns -> next Lock returns (clamped at 0)
	Wait     dist          `json:"wait"`                // one Lock call
	Cycle    dist          `json:"cycle"`               // Lock+Unlock, uncontended
	Rejected int           `json:"rejected,omitempty"`  // guard: stale tokens refused (expected)
	Errors   int           `json:"errors"`
	FirstErr string        `json:"first_error,omitempty"`
	Load     *load         `json:"load,omitempty"` // nil: not measured (no metrics endpoint)
	// Elections, expiry: how long closing a candidate took after its
	// client had been closed under it (it must not wait for etcd).
	VanishedClose *dist `json:"vanished_close,omitempty"`
	// Waiters: what the parked waiters cost the process.
	Footprint *footprint `json:"footprint,omitempty"`
	Settle    *settling  `json:"settle,omitempty"`

	// Contended locks: each handoff divided at the return of the previous
	// holder's Unlock.
	Split *handoffSplit `json:"handoff_split,omitempty"`

	// Raw samples, for plots and for pooling slices (poolSides).
	handoffs, waits, cycles, fromReturn []time.Duration
}

// handoffSplit divides each handoff (previous holder calls Unlock -> next
// holder's Lock returns) at the moment the previous holder's Unlock call
// returned, as measured from outside the lock: Handoff = Unlock + Rest
// sample by sample, so the means add up; the percentiles need not.
type handoffSplit struct {
	Handoff dist `json:"handoff"` // the handoffs split (those whose Unlock succeeded)
	// The previous holder's Unlock call: its delete's commit as its client
	// sees it (disco: plus the session loop's bookkeeping around it).
	Unlock dist `json:"unlock"`
	// Unlock returned -> the next holder's Lock returned: the watch event's
	// delivery, the waiter's read, its session loop and client, not timed
	// apart. Negative when the next Lock returned first.
	Rest dist `json:"rest"`

	// Raw samples, handoff by handoff, for pooling slices.
	handoffs, unlocks, rests []time.Duration
}

// newHandoffSplit summarises handoffs split into unlocks and rests (the
// three indexed alike).
func newHandoffSplit(handoffs, unlocks, rests []time.Duration) *handoffSplit {
	return &handoffSplit{handoffs: handoffs, unlocks: unlocks, rests: rests,
		Handoff: summarize(slices.Clone(handoffs)), Unlock: summarize(slices.Clone(unlocks)), Rest: summarize(slices.Clone(rests))}
}

// addCounts adds o's counts, window and errors to s's.
func (s *side) addCounts(o *side) {
	s.Count += o.Count
	s.Window += o.Window
	s.Rejected += o.Rejected
	s.Errors += o.Errors
	if s.FirstErr == "" {
		s.FirstErr = o.FirstErr
	}
}

func (s *side) rate() {
	if s.Window > 0 {
		s.PerSec = float64(s.Count) / s.Window.Seconds()
	}
}

// errCount collects errors from many goroutines.
type errCount struct {
	mu    sync.Mutex
	n     int
	first error
}

func (e *errCount) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.first == nil {
		e.first = err
	}
}

// snapshot returns how many errors e has counted so far.
func (e *errCount) snapshot() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// addFrom counts in e the errors src counted since its snapshot n; src's
// first error stands for them.
func (e *errCount) addFrom(src *errCount, n int) {
	src.mu.Lock()
	d, first := src.n-n, src.first
	src.mu.Unlock()
	if d > 0 {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.n += d
		if e.first == nil {
			e.first = first
		}
	}
}

func (e *errCount) into(s *side) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s.Errors = e.n
	if e.first != nil {
		s.FirstErr = e.first.Error()
	}
}
