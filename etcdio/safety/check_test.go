package safety

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// regState is the state of a register with fencing: its value and the
// highest token it has seen.
type regState struct {
	value string
	mark  int64
}

// fencedRegister is the sequential specification of a register with
// fencing. A request with token t is accepted only if t is at least the
// mark, which it raises to t; a write sets the value, a read returns it.
//
// A rejected request never changes the value. If strict, it is rejected only
// when t is below the mark (SQLite's "WHERE token <= ?"). The guard is not
// strict: a request may raise the mark when it asks to be admitted and then
// be rejected because a still higher token arrived while it waited, so a
// rejection may also raise the mark without changing the value. An unknown
// outcome may have had either effect.
func fencedRegister(strict bool) porcupine.Model {
	nm := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{regState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(regState), input.(op), output.(op)
			applied := regState{value: s.value, mark: in.token}
			if in.write {
				applied.value = in.value
			}
			switch out.out {
			case accepted:
				if in.token < s.mark || !in.write && out.value != s.value {
					return nil
				}
				return []any{applied}
			case stale:
				if in.token < s.mark {
					return []any{s}
				}
				if strict {
					return nil
				}
				return []any{regState{value: s.value, mark: in.token}}
			default:
				if in.token < s.mark {
					return []any{s}
				}
				return []any{regState{value: s.value, mark: in.token}, applied}
			}
		},
		Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
		DescribeOperation: func(input, output any) string {
			return describe(output.(op))
		},
		DescribeState: func(state any) string {
			s := state.(regState)
			return fmt.Sprintf("%q@%d", s.value, s.mark)
		},
	}
	return nm.ToModel()
}

// linearizable checks a register's history with porcupine.
func linearizable(history []op, strict bool, timeout time.Duration) (porcupine.CheckResult, time.Duration) {
	ops := make([]porcupine.Operation, 0, len(history))
	for _, o := range history {
		ret := o.ret
		if o.out == unknown {
			ret = math.MaxInt64 // it may take effect at any later time
		}
		in := o
		in.value = ""
		if o.write {
			in.value = o.value
		}
		ops = append(ops, porcupine.Operation{ClientId: o.client, Input: in, Call: o.call, Output: o, Return: ret})
	}
	start := time.Now()
	res := porcupine.CheckOperationsTimeout(fencedRegister(strict), ops, timeout)
	return res, time.Since(start)
}

// checkOrder returns an error if a resource accepted a token lower than one
// it had accepted before, in the resource's own order.
func checkOrder(what string, tokens []int64) error {
	for i := 1; i < len(tokens); i++ {
		if tokens[i] < tokens[i-1] {
			return fmt.Errorf("%s accepted token %d after token %d (positions %d, %d of %v)",
				what, tokens[i], tokens[i-1], i-1, i, tokens)
		}
	}
	return nil
}

// checkSections returns an error if two admitted critical sections with
// different tokens overlapped. Equal tokens (readers) may.
func checkSections(secs []section) error {
	s := slices.Clone(secs)
	slices.SortFunc(s, func(a, b section) int { return int(a.enter - b.enter) })
	for i := range s {
		for j := i + 1; j < len(s) && s[j].enter < s[i].exit; j++ {
			if s[j].token != s[i].token {
				return fmt.Errorf("critical sections overlap: owner %d token %d [%d, %d] and owner %d token %d [%d, %d]",
					s[i].owner, s[i].token, s[i].enter, s[i].exit, s[j].owner, s[j].token, s[j].enter, s[j].exit)
			}
		}
	}
	return nil
}

// checkNothingLost returns an error unless the writes the clients saw
// accepted are exactly those the resource logged.
func checkNothingLost(what string, history []op, logged []string) error {
	seen, maybe := map[string]int{}, map[string]bool{}
	for _, o := range history {
		switch {
		case o.write && o.out == accepted:
			seen[o.value]++
		case o.write && o.out == unknown:
			maybe[o.value] = true
		}
	}
	for _, v := range logged {
		if !maybe[v] {
			seen[v]--
		}
	}
	for v, n := range seen {
		switch {
		case n > 0:
			return fmt.Errorf("%s: write %q was acknowledged but is not in the resource's log", what, v)
		case n < 0:
			return fmt.Errorf("%s: write %q is in the resource's log but was not acknowledged as accepted", what, v)
		}
	}
	return nil
}

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
