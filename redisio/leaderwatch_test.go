package redisio_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/redisio"
)

// Candidates on one session that are listened to (here each has a
// subscriber) share one reader of their election's leader: a change of the
// queue (here a Resign) costs the session one read and one wakeup for them
// all, plus the wake of the next leader, not one per candidate, and every
// subscriber gets the change.
func TestCandidatesOnASessionShareTheLeaderRead(t *testing.T) {
	const candidates = 10
	r, reg, m, ctx := metered(t, 30*time.Second)
	cli := newClient(t, r)
	// A long TTL: no recheck read comes between the reads counted.
	s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli, redisio.WithTTL(20*time.Second), redisio.WithMetrics(m)))
	es := make([]election.Service, candidates)
	subs := make([]<-chan primitives.Event, candidates)
	for i := range es {
		es[i] = testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, "shared", redisio.WithSession(s)))
		subs[i] = es[i].Subscribe(ctx)
	}
	if err := es[0].Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	won := make(chan int, candidates)
	for i := 1; i < candidates; i++ {
		go func() {
			if err := es[i].Campaign(ctx, "next"); err == nil {
				won <- i
			}
		}()
	}
	testkit.Eventually(t, 10*time.Second, "every candidate queued", func() bool {
		n, err := cli.ZCard(ctx, "shared/queue").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == candidates
	})
	woken := func() float64 { return testkit.Gather(t, reg)[`disco_wakeups_total{kind="election"}`] }
	// Let the campaigns' own messages settle: the count stops moving.
	last := -1.0
	testkit.Eventually(t, 10*time.Second, "the campaigns' wakeups settled", func() bool {
		n := woken()
		settled := n == last
		last = n
		return settled
	})
	before := woken()
	if err := es[0].Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var next election.Leadership
	select {
	case i := <-won:
		next, _ = es[i].Term()
	case <-ctx.Done():
		t.Fatal("no candidate led after the leader resigned")
	}
	want := primitives.LeaderChanged{Key: next.Key, Value: next.Value, Token: next.Token()}
	for i, ch := range subs {
		untilChange(t, ch, want, fmt.Sprint("subscriber of candidate ", i))
	}
	if d := woken() - before; d > 4 {
		t.Errorf("a Resign woke the session's candidates %v times, want about 2 (one shared read, the next leader)", d)
	}
}

// untilChange reads events until LeaderChanged want (a slow reader may miss
// the changes before it, never the latest).
func untilChange(t *testing.T, events <-chan primitives.Event, want primitives.LeaderChanged, who string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("%s: events closed before %+v", who, want)
			}
			if e == primitives.Event(want) {
				return
			}
		case <-timeout:
			t.Fatalf("%s: no %+v within 10s", who, want)
		}
	}
}
