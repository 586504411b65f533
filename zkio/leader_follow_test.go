package zkio_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/zkio"
)

// electionFleet is n candidates of the election on one path, all on one
// session, each campaigning: won reports the index of each candidate whose
// Campaign returns.
type electionFleet struct {
	s     *zkio.Session
	cands []election.Service
	won   chan int
	ctx   context.Context
	t     *testing.T
}

// newElectionFleet opens the fleet's session (reporting to m) and
// candidates, campaigns with each, and returns once every candidacy is
// queued, with the index of the first leader.
func newElectionFleet(t *testing.T, ctx context.Context, servers []string, path string, n int, m *metrics.Metrics) (*electionFleet, int) {
	t.Helper()
	admin := adminConn(t, servers)
	// A long TTL: no waiter lives long enough to watch its own znode
	// (driver.WaitWatchAfter), so every watch counted is a failover's.
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(40*time.Second), zkio.WithMetrics(m)))
	f := &electionFleet{s: s, won: make(chan int, n), ctx: ctx, t: t}
	for range n {
		f.cands = append(f.cands, testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, path, zkio.WithSession(s))))
	}
	for i := range f.cands {
		f.campaign(i)
	}
	var first int
	select {
	case first = <-f.won:
	case <-ctx.Done():
		t.Fatal("no leader")
	}
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%d candidacies queued", n), func() bool {
		kids, _, err := admin.Children(path)
		if err != nil && err != zk.ErrNoNode {
			t.Fatal(err)
		}
		return len(kids) == n
	})
	return f, first
}

func (f *electionFleet) campaign(i int) {
	go func() {
		if err := f.cands[i].Campaign(f.ctx, fmt.Sprint("candidate-", i)); err == nil {
			f.won <- i
		}
	}()
}

// failover makes leader resign and campaign again, and returns the next
// leader's index once its Campaign has returned.
func (f *electionFleet) failover(leader int) int {
	f.t.Helper()
	if err := f.cands[leader].Resign(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	f.campaign(leader)
	select {
	case next := <-f.won:
		return next
	case <-f.ctx.Done():
		f.t.Fatal("no next leader")
		return -1
	}
}

// term is the current term of candidate i, who leads.
func (f *electionFleet) term(i int) election.Leadership {
	f.t.Helper()
	l, ok := f.cands[i].Term()
	if !ok {
		f.t.Fatalf("candidate %d leads without a term", i)
	}
	return l
}

const electionWakeups = `disco_wakeups_total{kind="election"}`

// TestElectionFailoverWakesOnlyTheNext: candidates that nobody subscribes
// to or observes only wait for their own turn, each watching the znode
// ahead of its own; they keep no watch of who leads. So a failover (the
// leader resigns and campaigns again) wakes the next candidate alone, with
// sixteen candidates on one session as with two: at most 3 wakeups per
// failover (the next candidate's, and the leader's watch of its own znode
// if its term outlived driver.HoldWatchAfter). Each candidate used to
// follow who leads with a watch of the election's children, which each
// Resign and each Campaign fired: here 7.5 wakeups per failover, growing
// with the candidates.
func TestElectionFailoverWakesOnlyTheNext(t *testing.T) {
	t.Parallel()
	const candidates, rounds = 16, 10
	servers := startZooKeeper(t)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, leader := newElectionFleet(t, ctx, servers, "/follow/unlistened", candidates, m)
	// The waiters' watches of the znode ahead, and the leader's of its own:
	// none of who leads.
	if n := zkio.Watchers(f.s); n > candidates {
		t.Errorf("%d candidates, nobody listening, hold %d watches: want at most one each", candidates, n)
	}
	if per := wakeupsPerFailover(t, reg, rounds, func() { leader = f.failover(leader) }); per > 3 {
		t.Errorf("%d failovers of %d candidates on one session woke them %.1f times each: want at most 3 each", rounds, candidates, per)
	}
}

// wakeupsPerFailover runs failover rounds times and returns the election
// wakeups reg counted per round.
func wakeupsPerFailover(t *testing.T, reg *prometheus.Registry, rounds int, failover func()) float64 {
	t.Helper()
	before := testkit.Gather(t, reg)[electionWakeups]
	for range rounds {
		failover()
	}
	woken := testkit.Gather(t, reg)[electionWakeups] - before
	t.Logf("%d failovers: %v wakeups", rounds, woken)
	return woken / float64(rounds)
}

// TestElectionFollowSharedPerSession: with every candidate of a session
// subscribed and two observing, each failover still costs the session one
// read of who leads (one watch, of the leader's znode): each subscription
// gets LeaderChanged for each new leader, first the leader when it
// subscribed (it had published none), and each Observe one delivery per
// change, the new leader, nothing in between. Wakeups per failover: the
// follow's watch, the next candidate's, and the resigning leader's watch
// of its own znode (its term outlives driver.HoldWatchAfter while the test
// reads the events); every candidate's own follow used to add two each.
func TestElectionFollowSharedPerSession(t *testing.T) {
	t.Parallel()
	const candidates, rounds = 8, 6
	servers := startZooKeeper(t)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f, leader := newElectionFleet(t, ctx, servers, "/follow/shared", candidates, m)
	subs := make([]<-chan primitives.Event, candidates)
	for i, c := range f.cands {
		subs[i] = c.Subscribe(ctx)
	}
	obs := []<-chan election.Leadership{f.cands[0].Observe(ctx), f.cands[1].Observe(ctx)}
	expect := func(l election.Leadership) {
		t.Helper()
		want := primitives.LeaderChanged{Key: l.Key, Value: l.Value, Token: l.Token()}
		for i, sub := range subs {
			if got := testkit.NextOf[primitives.LeaderChanged](t, sub, 10*time.Second); got != want {
				t.Fatalf("subscription of candidate %d: %+v, want %+v", i, got, want)
			}
		}
		for i, ob := range obs {
			select {
			case got := <-ob:
				if got.Key != l.Key || got.Created != l.Created || got.Value != l.Value {
					t.Fatalf("observation %d: %+v, want %+v", i, got, l)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("observation %d: nothing within 10s, want %+v", i, l)
			}
		}
	}
	expect(f.term(leader))
	per := wakeupsPerFailover(t, reg, rounds, func() {
		leader = f.failover(leader)
		expect(f.term(leader))
	})
	if per > 3 {
		t.Errorf("%d failovers of %d subscribed candidates on one session woke them %.1f times each: want at most 3 each", rounds, candidates, per)
	}
}

// TestElectionFollowStopsWithItsListeners: a service follows who leads
// while an Observe or a subscription lives, and stops when the last one's
// context ends; following again takes over the watch the last follow left
// (the client cannot remove it), so that observations come and go without
// piling up watches. A subscription that starts while the leader is the one
// the service last published gets no LeaderChanged for it, then each
// change. Close stops the follow too.
func TestElectionFollowStopsWithItsListeners(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const path = "/follow/listeners"
	lead := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(servers, path))
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	e, err := zkio.NewElection(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := lead.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	l, _ := lead.Term()
	if n := zkio.Watchers(s); n != 0 {
		t.Fatalf("an election nobody listens to holds %d watches", n)
	}
	for i := range 5 {
		octx, stop := context.WithCancel(ctx)
		if got := <-e.Observe(octx); got.Created != l.Created {
			t.Fatalf("observation %d: %+v, want %+v", i, got, l)
		}
		stop()
		testkit.Eventually(t, 10*time.Second, "the follow stopped", func() bool { return zkio.Following(s) == 0 })
		if n := zkio.Watchers(s); n != 1 {
			t.Fatalf("after %d observations came and went: %d watches, want the one of the leader's znode", i+1, n)
		}
	}
	sctx, stop := context.WithCancel(ctx)
	events := e.Subscribe(sctx)
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testkit.NextOf[primitives.LeaderChanged](t, events, 10*time.Second); got != (primitives.LeaderChanged{}) {
		t.Fatalf("first LeaderChanged after the leader resigned: %+v, want no leader", got)
	}
	stop()
	testkit.Eventually(t, 10*time.Second, "the follow stopped", func() bool { return zkio.Following(s) == 0 })
	// The follow left its watch of the path's children (nobody leads);
	// the next candidacy fires it, and it goes.
	if err := lead.Campaign(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the left watch fired", func() bool { return zkio.Watchers(s) == 0 })

	e.Subscribe(ctx) // lives past Close
	testkit.Eventually(t, 10*time.Second, "the follow started", func() bool { return zkio.Following(s) == 1 })
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the follow stopped at Close", func() bool { return zkio.Following(s) == 0 })
}

// TestElectionFollowWalksTheQueue: a follow learns who leads after a
// change from the znodes its last listing showed queued after the leader
// (a newcomer queues after them all), and lists again once they are gone.
// An observer on a session of its own sees a proclaimed value, then, with
// the two candidates next in line withdrawn while the leader led, the one
// after them, then each leader of more failovers than the listing named,
// one delivery each.
func TestElectionFollowWalksTheQueue(t *testing.T) {
	t.Parallel()
	const candidates = 5
	servers := startZooKeeper(t)
	_, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const path = "/follow/walk"
	f, leader := newElectionFleet(t, ctx, servers, path, candidates, m)
	watcher := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(servers, path))
	obs := watcher.Observe(ctx)
	expect := func(what string, l election.Leadership) {
		t.Helper()
		select {
		case got := <-obs:
			if got.Key != l.Key || got.Created != l.Created || got.Value != l.Value {
				t.Fatalf("%s: observed %+v, want %+v", what, got, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: nothing observed within 10s, want %+v", what, l)
		}
	}
	expect("first", f.term(leader))
	if err := f.cands[leader].Proclaim(ctx, "proclaimed"); err != nil {
		t.Fatal(err)
	}
	expect("after Proclaim", f.term(leader))
	// Withdraw the two next in line (by their znodes' order), then fail
	// over: the one after them leads.
	admin := adminConn(t, servers)
	kids, _, err := admin.Children(path)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(kids, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	for _, kid := range kids[1:3] {
		data, _, err := admin.Get(path + "/" + kid)
		if err != nil {
			t.Fatal(err)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(string(data), "candidate-"))
		if err != nil || i == leader {
			t.Fatalf("znode %s next in line holds %q", kid, data)
		}
		if err := f.cands[i].Close(); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 8 {
		leader = f.failover(leader)
		expect(fmt.Sprint("failover ", round), f.term(leader))
	}
}
