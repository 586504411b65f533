package zkio

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestQueueOrderAndBlockers(t *testing.T) {
	r := func(seq string) string { return "_c_0f-" + readMarker + seq }
	w := func(seq string) string { return "_c_1e-" + writeMarker + seq }
	children := []string{
		r("0000000007"), w("0000000003"), r("0000000001"), r("0000000002"),
		w("0000000005"), r("0000000006"),
		"_c_2d-lock-0000000004", // another kind: not in this queue
		"__READ__",              // no sequence
		r("00000000x8"),         // not digits
		"unrelated-0000000009",  // no marker
	}
	q := queueOf(children, readMarker, writeMarker)
	var names []string
	for _, m := range q {
		names = append(names, m.name)
	}
	want := []string{r("0000000001"), r("0000000002"), w("0000000003"), w("0000000005"), r("0000000006"), r("0000000007")}
	if !slices.Equal(names, want) {
		t.Fatalf("queue:\n got %q\nwant %q", names, want)
	}
	// Readers at the front hold together; a writer waits for the member
	// just ahead; a reader for the nearest writer ahead.
	for i, want := range []int{-1, -1, 1, 2, 3, 3} {
		in, ahead, waits := standing(children, q[i].name, readMarker, writeMarker)
		switch {
		case !in:
			t.Errorf("%s: not found in the queue", q[i].name)
		case want < 0 && waits:
			t.Errorf("%s waits for %s, want it to hold", q[i].name, ahead.name)
		case want >= 0 && (!waits || ahead.name != q[want].name):
			t.Errorf("%s waits for %q (%v), want %s", q[i].name, ahead.name, waits, q[want].name)
		}
	}
	locks := queueOf(children, lockMarker)
	if in, _, waits := standing(children, locks[0].name, lockMarker); len(locks) != 1 || !in || waits {
		t.Fatalf("lock queue %v: want one member, holding", locks)
	}
}

// sortedBlocker is the rule standing applies, read off the sorted queue q:
// the index of the member q[i] waits for, -1 if it holds.
func sortedBlocker(q []member, i int) int {
	if q[i].marker != readMarker {
		return i - 1
	}
	for j := i - 1; j >= 0; j-- {
		if q[j].marker != readMarker {
			return j
		}
	}
	return -1
}

// standing and firstOf, one pass over the children, answer what sorting
// the whole queue (queueOf, blocker) answers: for every member, whether it
// is in the queue and whom it waits for; the queue's first n members.
func TestStandingAndFirstOfAgreeWithTheSortedQueue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	markers := []string{readMarker, writeMarker}
	for round := range 200 {
		var children []string
		for i := range rng.IntN(40) {
			marker := markers[rng.IntN(2)]
			children = append(children, fmt.Sprintf("_c_%02x-%s%010d", i, marker, rng.IntN(1000)*50+i))
		}
		children = append(children, "__READ__", "_c_ff-lock-0000000001", "unrelated")
		q := queueOf(children, markers...)
		for i, m := range q {
			in, ahead, waits := standing(children, m.name, markers...)
			j := sortedBlocker(q, i)
			if !in || waits != (j >= 0) || (waits && ahead.name != q[j].name) {
				t.Fatalf("round %d: standing of %s = %v, %q, %v; sorted: blocker %d of %v", round, m.name, in, ahead.name, waits, j, q)
			}
		}
		if in, _, _ := standing(children[1:], children[0], markers...); len(children) > 3 && in {
			t.Fatalf("round %d: %s found in a listing without it", round, children[0])
		}
		for _, n := range []int{1, 3, 16} {
			want := q[:min(n, len(q))]
			if got := firstOf(children, n, markers...); !slices.Equal(got, want) {
				t.Fatalf("round %d: firstOf(%d) = %v, want %v", round, n, got, want)
			}
		}
	}
}

// memberOf reads the layout's rule: the sequence is all that follows the
// name's last marker, digits only and at least one. It reads the name's
// tail alone; on names built of the layout's pieces in any order it
// answers as a reading of that rule does.
func TestMemberOfReadsTheLayout(t *testing.T) {
	markers := []string{lockMarker, latchMarker, readMarker, writeMarker}
	byRule := func(child string) (member, bool) {
		best := -1
		var m member
		for _, marker := range markers {
			i := strings.LastIndex(child, marker)
			if i < 0 || i <= best {
				continue
			}
			seq := child[i+len(marker):]
			if seq == "" || strings.Trim(seq, "0123456789") != "" {
				continue
			}
			best, m = i, member{name: child, marker: marker, seq: seq}
		}
		return m, best >= 0
	}
	pieces := append([]string{"_c_", "0f3a-", "7", "0000000012", "-", "x", ""}, markers...)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		var b strings.Builder
		for range rng.IntN(6) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		child := b.String()
		want, wantOK := byRule(child)
		if got, ok := memberOf(child, markers...); ok != wantOK || got != want {
			t.Fatalf("memberOf(%q) = %+v, %v; the rule reads %+v, %v", child, got, ok, want, wantOK)
		}
	}
}

// BenchmarkStanding: a woken candidate's pass over a listing of 1,000
// children in LeaderLatch's layout.
func BenchmarkStanding(b *testing.B) {
	children := make([]string, 1000)
	for i := range children {
		children[i] = fmt.Sprintf("_c_%08x-0000-4000-8000-%012x-%s%010d", i, i, latchMarker, 1000-i)
	}
	own := children[0]
	for b.Loop() {
		if in, _, waits := standing(children, own, latchMarker); !in || !waits {
			b.Fatal("own not waiting")
		}
	}
}
