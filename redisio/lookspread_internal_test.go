package redisio

import "testing"

// A waiter looks again on its own every re-check interval while fewer
// than 8 holds are ahead of it in its queue, the waiters a release or an
// expiry is about to reach, and up to 4 intervals apart further back.
func TestLookSpread(t *testing.T) {
	for place, want := range map[int64]int64{-1: 1, 0: 1, 1: 1, 7: 1, 8: 2, 15: 2, 16: 3, 24: 4, 999: 4} {
		if got := lookSpread(place); got != want {
			t.Errorf("lookSpread(%d) = %d, want %d", place, got, want)
		}
	}
}
