package zkio

import (
	"slices"
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
	for i, wantBlocker := range []int{-1, -1, 1, 2, 3, 3} {
		if got := blocker(q, i); got != wantBlocker {
			t.Errorf("blocker of %s: %d, want %d", q[i].name, got, wantBlocker)
		}
	}
	locks := queueOf(children, lockMarker)
	if len(locks) != 1 || blocker(locks, 0) != -1 {
		t.Fatalf("lock queue %v: want one member, holding", locks)
	}
}
