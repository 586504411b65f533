package memio_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives/barrier"
)

// A party whose Enter ends as the count completes either is in (nil) or
// is not counted: never both counted by the others and failed. Each round
// cancels the waiting party's context just before the last party enters
// (the order in which the two meet is the scheduler's, hence the rounds).
func TestDoubleBarrierGivenUpPartyNotCounted(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	for i := range 50 {
		name := fmt.Sprintf("/b%d", i)
		a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(memio.NewDoubleBarrier(st, name, 2))
		b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(memio.NewDoubleBarrier(st, name, 2))
		actx, acancel := context.WithCancel(context.Background())
		aerr := make(chan error, 1)
		go func() { aerr <- a.Enter(actx) }()
		testkit.Eventually(t, 10*time.Second, "a's key", func() bool { return len(st.Keys(name+"/waiters/")) == 1 })
		bctx, bcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		acancel()
		errB := b.Enter(bctx)
		errA := <-aerr
		bcancel()
		if errA != nil && errB == nil {
			t.Fatalf("round %d: a's Enter returned %v, yet b passed the barrier counting it", i, errA)
		}
		if errA == nil && errB != nil {
			t.Fatalf("round %d: a passed the barrier, b's Enter returned %v", i, errB)
		}
	}
}
