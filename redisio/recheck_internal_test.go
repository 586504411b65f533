package redisio

import (
	"testing"
	"time"
)

// TestRecheckSpreads: a waiter's next timed look comes after a random half
// to all of the re-check interval, drawn afresh each time, never later
// than the interval (the bound on a missed wake message). Waiters used to
// wait exactly the interval, so that a thousand candidates campaigning at
// once looked again in step, every second: two runs of bench's fleet
// scenario counted 6.3 and 4.2 requests per failover, by how often their
// slices met those bursts. This tests the draw, not that every wait loop
// uses it (queue.go's and barrier_double.go's do).
func TestRecheckSpreads(t *testing.T) {
	const d = time.Second
	seen := map[time.Duration]bool{}
	lo, hi := d, time.Duration(0)
	for range 1000 {
		w := spread(d)
		if w < d/2 || w > d {
			t.Fatalf("spread(%v) = %v, want within [%v, %v]", d, w, d/2, d)
		}
		seen[w] = true
		lo, hi = min(lo, w), max(hi, w)
	}
	// 1,000 draws over half a second: distinct, and covering most of it.
	if len(seen) < 900 || hi-lo < d/2*9/10 {
		t.Errorf("1000 draws: %d distinct, from %v to %v: want spread over [%v, %v]", len(seen), lo, hi, d/2, d)
	}
}
