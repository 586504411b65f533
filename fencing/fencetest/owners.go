package fencetest

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ahrtr/disco/fencing"
)

// op is one request of ManyOwners: its input, its outcome and when it ran
// (a logical clock: every call and return takes the next tick).
type op struct {
	owner     int
	write     bool
	token     fencing.Token
	value     string // written, or read
	out       outcome
	err       error
	call, ret int64
}

func (o op) String() string {
	what := "read"
	if o.write {
		what = "write"
	}
	res := map[outcome]string{applied: "applied", stale: "refused as stale", refused: "refused", unknown: "outcome unknown", unsent: "not sent"}[o.out]
	if !o.write && o.out == applied {
		res = "read"
	}
	s := fmt.Sprintf("[%d, %d] owner %d %s with token %d: %s %q", o.call, o.ret, o.owner, what, o.token, res, o.value)
	if o.err != nil {
		s += fmt.Sprintf(" (%v)", o.err)
	}
	return s
}

// regState is the state of a fenced register: the value of the last write
// applied and its mark. unseen: no write of the history was applied yet and
// the register may hold what earlier histories left (an unkeyed resource
// has one register for them all), so a read may return anything, and
// from then on that.
type regState struct {
	value  string
	mark   fencing.Token
	unseen bool
}

// fencedRegister is the sequential specification of a fenced register. A
// write with token t is applied only if t is at least the mark, and then
// sets the value and raises the mark to t. A write that was not applied
// never changes the value; it may have raised the mark to t (a guard raises
// it when the request asks to be admitted, and a still higher token can
// supersede the request before it acts). A read returns the value; a fenced
// read may raise the mark too. A write of unknown outcome may have had
// either effect. With leftover, the register starts with whatever earlier
// histories left in it.
func fencedRegister(leftover bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{regState{unseen: leftover}} },
		Step: func(state, input, output any) []any {
			s, o := state.(regState), output.(op)
			raised := s
			raised.mark = max(s.mark, o.token)
			next := []any{s}
			if raised != s {
				next = append(next, raised)
			}
			switch {
			case !o.write && o.out == applied && s.unseen:
				return []any{regState{value: o.value, mark: raised.mark}, regState{value: o.value, mark: s.mark}}
			case !o.write && o.out == applied:
				if o.value != s.value {
					return nil
				}
				return next
			case !o.write || o.out == stale || o.out == refused:
				return next
			case o.token < s.mark:
				if o.out == applied {
					return nil
				}
				return next
			case o.out == applied:
				return []any{regState{value: o.value, mark: o.token}}
			default: // unknown
				return append(next, regState{value: o.value, mark: o.token})
			}
		},
		Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
		DescribeOperation: func(_, output any) string {
			return output.(op).String()
		},
		DescribeState: func(state any) string {
			s := state.(regState)
			return fmt.Sprintf("%q, mark %d", s.value, s.mark)
		},
	}
	return nm.ToModel()
}

// ownerCount and ownerOps shape ManyOwners: that many owners at once, each
// writing and reading in that order.
const ownerCount = 6

var ownerOps = []bool{true, false, true, true} // true: write

// checkTimeout bounds porcupine's search; beyond it the result is unknown,
// and reported as such.
const checkTimeout = 20 * time.Second

func manyOwners(t testing.TB, k *kit) {
	ctx := historyContext(t)
	g := k.register(t, ctx, "doc")
	res := &k.r
	var (
		clock   atomic.Int64
		mu      sync.Mutex // serialises grants (token order) and guards ops
		ops     []op
		tokens  = make([]fencing.Token, ownerCount)
		grantEr error
	)
	do := func(owner int, write bool, tok fencing.Token, v string) op {
		o := op{owner: owner, write: write, token: tok, value: v, call: clock.Add(1)}
		req := Request{Scope: g.scope, Token: tok.String(), TokenScope: g.scope}
		if write {
			req.Value = v
			o.err = res.Write(ctx, req)
			o.out = outcomeOf(o.err)
		} else {
			o.value, o.err = res.Read(ctx, req)
			o.out = applied
			if o.err != nil {
				o.out = refused // no observation
			}
		}
		o.ret = clock.Add(1)
		if o.out == unknown || o.out == unsent {
			o.out, o.ret = unknown, math.MaxInt64 // it may take effect at any later time
		}
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
		return o
	}
	k.fresh()

	// Phase 1: every owner takes a grant (in turn: tokens in grant order)
	// and writes and reads, all at once. With tokens the kit makes up,
	// every third owner joins the previous grant, as a reader of an rwlock
	// shares its token.
	_ = concurrently(ownerCount, func(i int) error {
		mu.Lock()
		last := slices.Max(tokens)
		var tok fencing.Token
		if k.r.Grant == nil && i%3 == 2 && last > 0 {
			tok = last
		} else {
			var err error
			if tok, err = k.tryGrant(ctx, g.scope); err != nil {
				grantEr = cmpOr(grantEr, err)
				mu.Unlock()
				return nil
			}
		}
		tokens[i] = tok
		mu.Unlock()
		for j, write := range ownerOps {
			do(i, write, tok, value(fmt.Sprintf("owner %d, op %d", i, j), tok))
		}
		return nil
	})
	if grantEr != nil {
		t.Fatalf("ManyOwners: %v", grantEr)
	}

	// Phase 2: every owner writes once more, one after another, the newest
	// first: all but the newest grant's owners are zombies now.
	order := make([]int, ownerCount)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(tokens[b], tokens[a]) })
	for _, i := range order {
		do(i, true, tokens[i], value(fmt.Sprintf("owner %d, late", i), tokens[i]))
	}

	// Phase 3: the newest owner still writes, and everyone sees it.
	newest := order[0]
	last := do(newest, true, tokens[newest], value(fmt.Sprintf("owner %d, last", newest), tokens[newest]))
	if last.out != applied {
		t.Errorf("ManyOwners: after the zombies' late writes, the newest owner's write (owner %d, token %d) was refused (%v): it holds the newest grant",
			newest, tokens[newest], last.err)
	}
	do(newest, false, tokens[newest], "")

	history := make([]porcupine.Operation, len(ops))
	for i, o := range ops {
		in := o
		in.value = ""
		history[i] = porcupine.Operation{ClientId: o.owner, Input: in, Call: o.call, Output: o, Return: o.ret}
	}
	model := fencedRegister(!k.r.Keyed)
	result, info := porcupine.CheckOperationsVerbose(model, history, checkTimeout)
	switch result {
	case porcupine.Illegal:
		slices.SortFunc(ops, func(a, b op) int { return cmp.Compare(a.call, b.call) })
		lines := make([]string, len(ops))
		for i, o := range ops {
			lines[i] = "\t" + o.String()
		}
		where := ""
		if a, ok := t.(interface{ ArtifactDir() string }); ok {
			path := filepath.Join(a.ArtifactDir(), "many-owners.html")
			if err := porcupine.VisualizePath(model, info, path); err == nil {
				where = fmt.Sprintf("\n(porcupine's picture of it: %s; go test -artifacts keeps it)", path)
			}
		}
		t.Errorf("ManyOwners: the history of %d owners is not linearizable as a fenced register: no order of its requests explains the answers, so a zombie's write with a token below one already accepted was applied, or a read saw a write the fence refused. Requests, by call time [call, return]:\n%s%s",
			ownerCount, strings.Join(lines, "\n"), where)
	case porcupine.Unknown:
		t.Logf("ManyOwners: porcupine found no verdict within %v: the history was not checked", checkTimeout)
	}
}
