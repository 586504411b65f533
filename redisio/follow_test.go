package redisio_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/redisio"
)

// TestFailoverWakesOnlyListenedSessions: an election's session follows the
// leader only while someone listens to one of its services there (a
// subscription or an Observe). With candidates on several sessions and
// nobody listening, a failover (the leader resigns, the next candidate's
// Campaign returns) wakes the next leader alone, whatever the number of
// sessions, and no session subscribes to the name's channel. A subscriber
// and an observer, on two sessions, then cost one wakeup each per failover
// and get each change of leader once; when their contexts end, the
// sessions drop the name's channel again. Before, every session with a
// candidate on the name subscribed to its channel and read the leader at
// each change: 7 wakeups per failover here, not 1.
func TestFailoverWakesOnlyListenedSessions(t *testing.T) {
	const sessions, perSession, failovers = 6, 3, 5
	const name = "follow-fleet"
	r, reg, m, ctx := metered(t, 60*time.Second)
	admin := newClient(t, r)
	var cands []election.Service
	for range sessions {
		cli := newClient(t, r)
		// A long TTL: the counts are of messages, not of timed looks.
		s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli, redisio.WithTTL(20*time.Second), redisio.WithMetrics(m)))
		for range perSession {
			cands = append(cands, testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name, redisio.WithSession(s))))
		}
	}
	won := make(chan int, len(cands))
	campaign := func(i int) {
		go func() {
			if err := cands[i].Campaign(ctx, fmt.Sprint("candidate-", i)); err == nil {
				won <- i
			}
		}()
	}
	for i := range cands {
		campaign(i)
	}
	var leader int
	select {
	case leader = <-won:
	case <-ctx.Done():
		t.Fatal("no leader")
	}
	testkit.Eventually(t, 20*time.Second, "every candidate queued", func() bool {
		n, err := admin.ZCard(ctx, name+"/queue").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == int64(len(cands))
	})
	subscribed := func() int64 {
		n, err := admin.PubSubNumSub(ctx, name+"/wake").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[name+"/wake"]
	}
	woken := func() float64 { return testkit.Gather(t, reg)[`disco_wakeups_total{kind="election"}`] }
	// failover makes the leader resign and campaign again, and returns
	// the next leader's term once its Campaign returned.
	failover := func() election.Leadership {
		t.Helper()
		if err := cands[leader].Resign(ctx); err != nil {
			t.Fatal(err)
		}
		campaign(leader)
		select {
		case leader = <-won:
		case <-ctx.Done():
			t.Fatal("no new leader after a Resign")
		}
		l, ok := cands[leader].Term()
		if !ok {
			t.Fatalf("candidate %d won but has no term", leader)
		}
		return l
	}

	// Nobody listens: no subscription to the name's channel, and each
	// failover wakes the next leader's waiter alone.
	if n := subscribed(); n != 0 {
		t.Errorf("%d connections on %s/wake with nobody listening, want 0", n, name)
	}
	// Whatever the campaigns set off has been taken in: the count stops
	// moving.
	last := -1.0
	testkit.Eventually(t, 10*time.Second, "the campaigns' wakeups settled", func() bool {
		n := woken()
		settled := n == last
		last = n
		return settled
	})
	before := woken()
	for range failovers {
		failover()
	}
	per := (woken() - before) / failovers
	t.Logf("nobody listening: %.1f wakeups per failover over %d sessions", per, sessions)
	if per > 1.5 {
		t.Errorf("%.1f wakeups per failover over %d sessions with nobody listening, want about 1 (the next leader)", per, sessions)
	}

	// A subscriber on a candidate of the first session, an observer on one
	// of the second's.
	lctx, stopListening := context.WithCancel(ctx)
	defer stopListening()
	events := cands[0].Subscribe(lctx)
	observed := cands[perSession].Observe(lctx)
	current, ok := cands[leader].Term()
	if !ok {
		t.Fatal("the leader has no term")
	}
	// The subscriber's first LeaderChanged is the leader when following
	// began (its service had published none); the observer's first value
	// is the leader when it was called.
	nextChange(t, events, current)
	nextObserved(t, observed, current)
	testkit.Eventually(t, 10*time.Second, "the two listened sessions on the name's channel", func() bool { return subscribed() == 2 })
	before = woken()
	for range failovers {
		l := failover()
		nextChange(t, events, l)
		nextObserved(t, observed, l)
	}
	// Each change reached both once (nextChange and nextObserved fail on
	// any other value first): the next leader's waiter and one read on
	// each of the two listened sessions.
	per = (woken() - before) / failovers
	t.Logf("two sessions listening: %.1f wakeups per failover over %d sessions", per, sessions)
	if per > 3.5 {
		t.Errorf("%.1f wakeups per failover with two listened sessions of %d, want about 3", per, sessions)
	}

	// Nobody listens any more: the sessions drop the channel.
	stopListening()
	testkit.Eventually(t, 10*time.Second, "no connection on the name's channel", func() bool { return subscribed() == 0 })

	// Listening again without a change publishes nothing (its service
	// published this leader already): the next LeaderChanged is the next
	// leader's.
	events = cands[0].Subscribe(ctx)
	testkit.Eventually(t, 10*time.Second, "the listened session on the name's channel", func() bool { return subscribed() == 1 })
	nextChange(t, events, failover())
}

// nextChange reads events up to the next LeaderChanged and fails unless it
// reports want.
func nextChange(t *testing.T, events <-chan primitives.Event, want election.Leadership) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatal("events closed")
			}
			if c, ok := e.(primitives.LeaderChanged); ok {
				if c != (primitives.LeaderChanged{Key: want.Key, Value: want.Value, Token: want.Token()}) {
					t.Fatalf("LeaderChanged %+v, want the leader %+v", c, want)
				}
				return
			}
		case <-timeout:
			t.Fatalf("no LeaderChanged for %+v within 10s", want)
		}
	}
}

// nextObserved reads the next value of an Observe and fails unless it is
// want's term.
func nextObserved(t *testing.T, observed <-chan election.Leadership, want election.Leadership) {
	t.Helper()
	select {
	case l, ok := <-observed:
		if !ok {
			t.Fatal("Observe closed")
		}
		if l.Key != want.Key || l.Created != want.Created || l.Value != want.Value {
			t.Fatalf("observed %+v, want the leader %+v", l, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no observation of %+v within 10s", want)
	}
}

// election.Lead watches its own term's end only: a candidate leading under
// it does not follow who leads, so its session stays off the name's
// channel.
func TestLeadDoesNotFollow(t *testing.T) {
	const name = "follow-lead"
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := newClient(t, r)
	e := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(newClient(t, r), name))
	leading, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_ = election.Lead(ctx, e, "v", func(ctx context.Context, _ election.Leadership) error {
			close(leading)
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-leading:
	case <-ctx.Done():
		t.Fatal("never led")
	}
	n, err := admin.PubSubNumSub(ctx, name+"/wake").Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[name+"/wake"] != 0 {
		t.Fatalf("%d connections on %s/wake while leading under election.Lead, want 0", n[name+"/wake"], name)
	}
	cancel()
	<-done
}
