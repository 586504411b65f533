package faultsuite

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestCheckersCatchViolations feeds the checkers histories that break the
// guarantee, so that a passing fault round means something.
func TestCheckersCatchViolations(t *testing.T) {
	w := func(c int, v string, tok, call, ret int64, out outcome) op {
		return op{client: c, write: true, value: v, token: tok, call: call, ret: ret, out: out}
	}
	rd := func(c int, v string, tok, call, ret int64) op {
		return op{client: c, value: v, token: tok, call: call, ret: ret, out: accepted}
	}
	good := []op{
		w(0, "a", 5, 0, 10, accepted),
		w(1, "b", 7, 11, 20, accepted),
		w(0, "c", 5, 15, 25, stale), // the zombie, concurrent with the new holder
		rd(2, "b", 9, 30, 40),
		w(1, "d", 7, 41, 50, stale),
	}
	for _, strict := range []bool{false, true} {
		if res, _ := linearizable(good, strict, 5*time.Second); res != porcupine.Ok {
			t.Errorf("strict=%v: a correct history judged %v", strict, res)
		}
	}
	for name, h := range map[string][]op{
		"stale token accepted after a newer one": {
			w(0, "a", 5, 0, 10, accepted), w(1, "b", 7, 11, 20, accepted), w(0, "c", 5, 21, 30, accepted),
		},
		"read misses the last accepted write": {
			w(0, "a", 5, 0, 10, accepted), w(1, "b", 7, 11, 20, accepted), rd(2, "a", 9, 21, 30),
		},
		"read with a newer token lets an older write in": {
			w(0, "a", 5, 0, 10, accepted), rd(2, "a", 9, 11, 20), w(1, "b", 7, 21, 30, accepted),
		},
	} {
		if res, _ := linearizable(h, false, 5*time.Second); res != porcupine.Illegal {
			t.Errorf("%s: judged %v, want Illegal", name, res)
		}
	}
	// Only the strict model (SQLite) refuses a rejection at or above the mark.
	if res, _ := linearizable([]op{w(0, "a", 5, 0, 10, accepted), w(1, "b", 7, 11, 20, stale)}, true, 5*time.Second); res != porcupine.Illegal {
		t.Errorf("strict: a fresh token rejected judged %v, want Illegal", res)
	}
	if checkOrder("r", []int64{3, 5, 5, 4}) == nil || checkOrder("r", []int64{3, 5, 5, 9}) != nil {
		t.Error("checkOrder")
	}
	if checkSections([]section{{0, 5, 0, 10}, {1, 7, 9, 12}}) == nil {
		t.Error("checkSections missed overlapping sections of different tokens")
	}
	if checkSections([]section{{0, 5, 0, 10}, {1, 5, 2, 12}, {2, 7, 13, 14}}) != nil {
		t.Error("checkSections refused readers sharing a token")
	}
	h := []op{w(0, "a", 5, 0, 10, accepted), w(0, "b", 5, 11, 20, accepted)}
	if checkNothingLost("r", h, []string{"a"}) == nil || checkNothingLost("r", h, []string{"a", "b", "c"}) == nil ||
		checkNothingLost("r", h, []string{"a", "b"}) != nil {
		t.Error("checkNothingLost")
	}
}
