package redisio_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestLockHandoffSendsOneWakeMessage: with 16 contenders on one lock, each
// on its own session (all reporting to one registry), a handoff sends one
// wake message to one session, the one whose waiter it grants, not one to
// every session that uses the name: the wake messages the sessions
// received (disco_wake_messages_total) per handoff (disco_handoffs_total)
// stay at about one whatever the number of contenders. Counted from the
// Warm-th acquisition to the Total-th, when every contender loops.
func TestLockHandoffSendsOneWakeMessage(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const contenders, warm, total = 16, 32, 192
	reg, m := testkit.NewMetrics(t)
	ls := make([]lock.Service, contenders)
	for i := range ls {
		ls[i] = lockOn(t, r, "wake-one", redisio.WithMetrics(m))
	}
	type counts struct{ messages, handoffs float64 }
	read := func() counts {
		got := testkit.Gather(t, reg)
		return counts{got[`disco_wake_messages_total{kind="lock"}`], got[`disco_handoffs_total{kind="lock"}`]}
	}
	var acquired atomic.Int64
	var mu sync.Mutex
	var from, to counts
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for ctx.Err() == nil {
				g, err := l.Lock(ctx)
				if err != nil {
					return // the last waiters, once the count is reached
				}
				switch int(acquired.Add(1)) {
				case warm:
					mu.Lock()
					from = read()
					mu.Unlock()
				case total:
					mu.Lock()
					to = read()
					mu.Unlock()
				}
				if err := l.Release(context.WithoutCancel(ctx), g); err != nil {
					t.Error(err)
				}
				if int(acquired.Load()) >= total {
					return
				}
			}
		})
	}
	testkit.Eventually(t, 60*time.Second, "every acquisition", func() bool { return int(acquired.Load()) >= total })
	stop()
	wg.Wait()
	mu.Lock()
	messages, handoffs := to.messages-from.messages, to.handoffs-from.handoffs
	mu.Unlock()
	t.Logf("%v wake messages for %v handoffs (%d contenders, acquisitions %d to %d)", messages, handoffs, contenders, warm, total)
	if handoffs < (total-warm)/2 {
		t.Fatalf("%v handoffs in %d acquisitions, want most of them: the contenders did not contend", handoffs, total-warm)
	}
	if per := messages / handoffs; per > 1.5 {
		t.Fatalf("%.2f wake messages per handoff at %d contenders, want about 1: a release's message reaches sessions whose waiters it does not grant", per, contenders)
	}
}
