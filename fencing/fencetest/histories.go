package fencetest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
)

// badToken is one token a resource must refuse.
type badToken struct {
	what string // what it is
	wire string // as sent
	why  string // what gets in if it is applied
}

// badTokens are the missing, malformed, zero and negative forms of token n
// (the next token a real owner would bring).
func badTokens(n fencing.Token) []badToken {
	s := n.String()
	lenient := "a lenient parser reads it as token " + s + ", so a client bug or a corrupt header writes with a token no grant carries"
	noGrant := "a client that holds no grant (its token source answers 0 or less) writes unchecked"
	return []badToken{
		{"no token", "", "a client that holds no grant (never locked, or lost its grant and did not stop), or that forgot the header on one route, writes unchecked"},
		{"token 0", "0", noGrant},
		{"a negative token", "-" + s, noGrant},
		{"a leading zero", "0" + s, lenient},
		{"a plus sign", "+" + s, lenient},
		{"a hexadecimal token", "0x" + strconv.FormatInt(int64(n), 16), lenient},
		{"a decimal point", s + ".0", lenient},
		{"trailing junk", s + "x", lenient},
		{"a list of tokens", s + "," + s, lenient},
		{"a token above the largest int64", "9223372036854775808", "a parser that wraps or saturates reads a huge token and raises the mark for good"},
	}
}

// refuseBad sends each of bad through the register, and reports an error
// for each that is applied. After a mark (fresh false), it also reads after
// each (nothing may have changed), and the owner of the mark writes again,
// which must be accepted: a refused bad token must not have raised the
// mark. On a fresh resource the reads and the owner's write wait for the
// end (a read carries a token, which a resource that fences reads would
// take as its first mark).
func (g *register) refuseBad(bad []badToken, when string, fresh bool) {
	g.t.Helper()
	res := &g.k.r
	var unsendable []string
	defer func() {
		if len(unsendable) > 0 {
			g.t.Logf("NoToken: the resource cannot be sent %s (%s): cases left out", strings.Join(unsendable, ", "), when)
		}
	}()
	for _, b := range bad {
		err := g.send(res, b.wire, g.scope, fmt.Sprintf("a write with %s %q %s", b.what, b.wire, when))
		switch outcomeOf(err) {
		case unsent:
			unsendable = append(unsendable, fmt.Sprintf("%s %q", b.what, b.wire))
			continue
		case applied:
			g.t.Errorf("NoToken: a write with %s (%q) %s was applied: %s", b.what, b.wire, when, b.why)
		}
		if fresh {
			continue
		}
		g.holds(res, fmt.Sprintf("a write with %s (%q) %s", b.what, b.wire, when))
		g.accept(res, g.mark, "the owner of the mark", fmt.Sprintf(
			"its token %d is the mark: the refused write with %s (%q) must not have raised it", g.mark, b.what, b.wire))
	}
}

func noToken(t testing.TB, k *kit) {
	g := k.register(t, historyContext(t), "doc")
	a := g.grant()
	if g.scope != "" || k.fresh() {
		when := "on a fresh resource"
		g.refuseBad(badTokens(a), when, true)
		g.readAs = a
		g.holds(&k.r, "the writes with bad tokens "+when)
	}
	g.accept(&k.r, a, "owner A", "it is the first valid token")
	g.refuseBad(badTokens(a+1), fmt.Sprintf("after token %d", a), false)
}

// zombie sends the late write of who with token t (below the mark) through
// res, and reports an error unless it is refused as stale and leaves the
// resource as it was. when says how the history got there, and cause what
// makes a resource fail it.
func (g *register) zombie(res *Resource, t fencing.Token, who, when, cause string) {
	g.t.Helper()
	name := historyName(g.t)
	err := g.write(res, t, value(who, t))
	switch outcomeOf(err) {
	case applied:
		g.t.Errorf("%s: %s, the late write of %s with token %d was applied although token %d had been accepted: a zombie overwrote the newer owner's write%s",
			name, when, who, t, g.mark, cause)
	case stale:
	default:
		g.t.Errorf("%s: %s, the late write of %s with token %d (below the mark %d) was refused, but not as stale (%v): a zombie must learn that its grant is over (an error wrapping fencing.ErrTokenStale; HTTP 409, gRPC FailedPrecondition), or it may retry",
			name, when, who, t, g.mark, err)
	}
	g.holds(res, fmt.Sprintf("the late write of token %d", t))
}

func staleWrite(t testing.TB, k *kit) {
	g := k.register(t, historyContext(t), "doc")
	res := &k.r
	a := g.grant()
	g.accept(res, a, "owner A", "A holds the newest grant")
	b := g.grant()
	g.accept(res, b, "owner B", fmt.Sprintf("B's grant (token %d) is newer than A's (%d)", b, a))
	g.zombie(res, a, "owner A", "after A was paused and B took over", "")
	g.accept(res, b, "owner B", fmt.Sprintf("B still holds the newest grant: its token %d is the mark", b))
	g.zombie(res, a, "owner A", "when A tried again", "")
}

// concurrently runs f(0) to f(n-1) at once and returns their errors.
func concurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

func equalTokens(t testing.TB, k *kit) {
	const n = 8
	g := k.register(t, historyContext(t), "doc")
	res := &k.r
	tok := g.grant()
	values := make(map[string]bool, n)
	for i := range n {
		values[value(fmt.Sprintf("reader %d", i), tok)] = true
	}
	errs := concurrently(n, func(i int) error { return g.write(res, tok, value(fmt.Sprintf("reader %d", i), tok)) })
	refusedN, first := 0, error(nil)
	for _, err := range errs {
		if err != nil {
			refusedN++
			first = cmpOr(first, err)
		}
	}
	if refusedN > 0 {
		t.Errorf("EqualTokens: %d of %d concurrent writes with the same token %d were refused (%v): readers of an rwlock share one token, and a resource that takes a token only once (or one at a time) locks the others out",
			refusedN, n, tok, first)
	}
	g.mark = tok
	if v := g.read(res); !values[v] {
		t.Errorf("EqualTokens: after %d concurrent writes with token %d, the resource holds %q, none of them", n, tok, v)
	} else {
		g.value = v
	}
	w := g.grant()
	g.accept(res, w, "a writer", fmt.Sprintf("its grant (token %d) is newer than the readers' (%d)", w, tok))
	errs = concurrently(n, func(i int) error { return g.write(res, tok, value(fmt.Sprintf("reader %d, late", i), tok)) })
	appliedN := 0
	for _, err := range errs {
		if err == nil {
			appliedN++
		}
	}
	if appliedN > 0 {
		t.Errorf("EqualTokens: %d of %d concurrent late writes with the readers' token %d were applied after the writer's token %d: zombies that share a token got in together",
			appliedN, n, tok, w)
	}
	g.holds(res, fmt.Sprintf("the readers' late writes with token %d", tok))
}

// cmpOr returns a if it is not nil, else b.
func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// twoScopes returns the registers of scopes a and b of the current
// history; on a resource that is not Keyed, it skips the history.
func twoScopes(t testing.TB, k *kit) (a, b *register) {
	if !k.r.Keyed {
		t.Skipf("%s: the resource is not Keyed (one mark for every request): there are no scopes to tell apart", historyName(t))
	}
	ctx := historyContext(t)
	return k.register(t, ctx, "a"), k.register(t, ctx, "b")
}

func otherScope(t testing.TB, k *kit) {
	ga, gb := twoScopes(t, k)
	res := &k.r
	ta := ga.grant()
	ga.accept(res, ta, "the holder of a", "it holds a's newest grant")
	tb := gb.grant()
	gb.accept(res, tb, "the holder of b", "it holds b's newest grant")

	err := ga.send(res, tb.String(), gb.scope, value("the holder of b, writing into a", tb))
	if outcomeOf(err) == applied {
		t.Errorf("OtherScope: a write to %s carrying a token of %s (token %d, above a's mark %d) was applied: the holder of one lock writes into another lock's resource; a keyed resource must refuse a token of another scope",
			ga.name(), gb.name(), tb, ta)
	}
	ga.holds(res, "a write with a token of another scope")

	ta2 := ga.grant()
	err = ga.send(res, ta2.String(), "", value("a client that sends no scope", ta2))
	switch outcomeOf(err) {
	case applied:
		t.Errorf("OtherScope: a write to %s carrying token %d without its scope was applied: a keyed resource cannot tell which lock such a token is of, so a token of any lock gets in",
			ga.name(), ta2)
	case unsent:
		t.Logf("OtherScope: the resource cannot be sent a token without its scope: case left out (%v)", err)
	}
	ga.holds(res, "a write with a token without its scope")
	ga.accept(res, ta2, "the next holder of a", "it holds a's newest grant and names its scope")
}

func independentScopes(t testing.TB, k *kit) {
	ga, gb := twoScopes(t, k)
	res := &k.r
	ta := ga.grant()
	tb := gb.grant()
	gb.accept(res, tb, "the holder of b", "it holds b's newest grant")
	ga.accept(res, ta, "the holder of a", fmt.Sprintf(
		"it holds a's newest grant, and b's higher token %d is of another lock: a resource that keeps one mark for all scopes locks the holder of one lock out whenever another lock has a newer grant", tb))
	ta2 := ga.grant()
	ga.accept(res, ta2, "the next holder of a", "it holds a's newest grant")
	ga.zombie(res, ta, "a's previous holder", "after a's next holder took over", "")
	gb.accept(res, tb, "the holder of b", fmt.Sprintf("it still holds b's newest grant: a's token %d must not touch b's mark", ta2))
}

func staleWriteAfterRestart(t testing.TB, k *kit) {
	if k.r.Restart == nil {
		t.Skip("StaleWriteAfterRestart: Resource.Restart is nil: the resource declares that it keeps nothing across a restart, so the kit cannot check that its mark survives one")
	}
	ctx := historyContext(t)
	g := k.register(t, ctx, "doc")
	res := &k.r
	a := g.grant()
	g.accept(res, a, "owner A", "A holds the newest grant")
	b := g.grant()
	g.accept(res, b, "owner B", fmt.Sprintf("B's grant (token %d) is newer than A's (%d)", b, a))
	if err := k.r.Restart(ctx); err != nil {
		t.Fatalf("StaleWriteAfterRestart: restarting the resource: %v", err)
	}
	g.zombie(res, a, "owner A", "after a restart of the resource",
		": the resource keeps its mark only in memory, so every restart lets the zombies back in (keep it durably: guard.WithStore, or in the row of the data)")
	g.accept(res, b, "owner B", "B still holds the newest grant: the restarted resource must take it")
	c := g.grant()
	g.accept(res, c, "owner C", "C's grant is the newest")
}

func replicas(t testing.TB, k *kit) {
	if k.r.Replica == nil {
		t.Skip("Replicas: Resource.Replica is nil: no second replica to check against the first")
	}
	g := k.register(t, historyContext(t), "doc")
	one, two := &k.r, k.r.Replica
	const cause = ": the replicas do not share their mark, so a zombie that reaches a replica that has not seen the newer token gets in"
	t1 := g.grant()
	g.accept(one, t1, "owner A through replica 1", "A holds the newest grant")
	t2 := g.grant()
	g.accept(two, t2, "owner B through replica 2", fmt.Sprintf("B's grant (token %d) is newer than A's (%d)", t2, t1))
	g.zombie(one, t1, "owner A", fmt.Sprintf("through replica 1, which never saw token %d", t2), cause)
	g.zombie(two, t1, "owner A", "through replica 2", "")
	g.holds(one, "the late writes (read through replica 1)")
	g.accept(one, t2, "owner B through replica 1", "B still holds the newest grant")
	t3 := g.grant()
	g.accept(one, t3, "owner C through replica 1", "C's grant is the newest")
	g.zombie(two, t2, "owner B", fmt.Sprintf("through replica 2, whose own last token was %d, after replica 1 accepted %d", t2, t3), cause)
	g.holds(one, "the late write (read through replica 1)")
}

// forgedGap is how far above the mark the forged token is: far above any
// grant a coordination service will issue during a test.
const forgedGap = 1 << 40

func forgedToken(t testing.TB, k *kit) {
	g := k.register(t, historyContext(t), "doc")
	res := &k.r
	tok := g.grant()
	g.accept(res, tok, "owner A", "A holds the newest grant")
	forged := tok + forgedGap
	if tok > math.MaxInt64-forgedGap {
		forged = math.MaxInt64
	}
	fv := value("a client with a forged token", forged)
	err := g.write(res, forged, fv)
	if k.r.Verifies {
		if outcomeOf(err) == applied {
			t.Errorf("ForgedToken: a write with token %d, far above any grant, was applied although the resource verifies tokens: one bad request (a client bug, a corrupt header, a hostile caller) raises the mark for good and locks every legitimate owner out",
				forged)
		}
		g.holds(res, fmt.Sprintf("the write with the forged token %d", forged))
		g.accept(res, tok, "owner A", "A still holds the newest real grant: the forged token must not have raised the mark")
		next := g.grant()
		g.accept(res, next, "owner B", "B's grant is newer than A's, and real")
		return
	}
	if outcomeOf(err) != applied {
		t.Skipf("ForgedToken: the resource refused a write with token %d, far above any grant (%v), although Resource.Verifies is false: if it verifies tokens, declare Verifies so that the kit checks it", forged, err)
	}
	next := g.grant()
	err = g.write(res, next, value("owner B", next))
	if k.r.Grant == nil {
		k.skipAbove(forged) // the kit's later tokens (Run called again on r) pass the forged one
	}
	if outcomeOf(err) == applied {
		t.Skipf("ForgedToken: NOT PROTECTED: the resource does not verify tokens (Resource.Verifies is false): it applied a write with token %d, far above any grant, and so keeps no mark that a forged token could not pass", forged)
	}
	t.Skipf("ForgedToken: NOT PROTECTED: the resource does not verify tokens (Resource.Verifies is false): it applied a write with token %d, far above any grant, and then refused the next legitimate owner (token %d: %v). One bad request (a client bug, a corrupt header, a hostile caller) bricks it until the coordination service's tokens pass %d. A guard that asks a guard.Verifier (each backend's NewVerifier) refuses such a token",
		forged, next, err, forged)
}
