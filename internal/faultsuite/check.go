package faultsuite

import (
	"fmt"
	"math"
	"slices"
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
