package zkio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestMetrics: a session and its primitives given WithMetrics report a
// grant, a release, a loss (a znode deleted by someone else), a suspension
// (the session unheard from), acknowledged renewals, the loop's mailbox and
// a change of leader to the registry's series.
func TestMetrics(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(4*time.Second), zkio.WithMetrics(m)))
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/metrics/lock", zkio.WithSession(s)))
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, "/metrics/election", zkio.WithSession(s)))
	events := l.Subscribe(ctx)

	// A grant and its release.
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// A grant lost to someone else's delete.
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(g.Key, -1); err != nil {
		t.Fatal(err)
	}
	testkit.NextOf[primitives.Lost](t, events, 10*time.Second)
	// A suspension: the server hears nothing until resumed.
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	testhook.PauseRenewal(s, resume)
	testkit.NextOf[primitives.Suspended](t, events, 10*time.Second)
	close(resume)
	testkit.NextOf[primitives.Resumed](t, events, 10*time.Second)
	// A leader, with a subscriber: an election follows who leads only
	// while someone listens.
	e.Subscribe(ctx)
	if err := e.Campaign(ctx, "me"); err != nil {
		t.Fatal(err)
	}

	// The election learns who leads from its session's reads, after
	// Campaign.
	testkit.Eventually(t, 10*time.Second, "a leader change", func() bool {
		return testkit.Gather(t, reg)["disco_leader_changes_total"] >= 1
	})
	got := testkit.Gather(t, reg)
	want := map[string]float64{
		`disco_acquisitions_total{kind="lock"}`:               3,
		`disco_acquisitions_total{kind="election"}`:           1,
		`disco_hold_seconds_count{kind="lock"}`:               2,
		`disco_losses_total{cause="key_deleted",kind="lock"}`: 1,
		`disco_suspensions_total`:                             -1, // the paused renewals; a loaded machine may add more
		`disco_acquire_wait_seconds_count{kind="lock"}`:       3,
		`disco_handoffs_total{kind="lock"}`:                   0,
		`disco_leader_changes_total`:                          -1, // at least one
		`disco_keepalive_rtt_seconds_count`:                   -1,
		`disco_lease_margin_seconds_count`:                    -1,
		`disco_loop_mailbox_depth_count`:                      -1,
	}
	testkit.WantSeries(t, got, want)
	for _, series := range []string{`disco_rechecks_total{kind="lock"}`, `disco_wake_messages_total{kind="lock"}`} {
		if v, ok := got[series]; ok {
			t.Errorf("%s = %v on ZooKeeper, which neither looks on a timer nor sends wake messages", series, v)
		}
	}
}

// TestMetricsWakeups: a waiter parked behind a holder, on a session of its
// own, wakes on the watch of the znode ahead when the holder lets go.
func TestMetricsWakeups(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, "/metrics/wake", zkio.WithMetrics(m)))
	w := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, "/metrics/wake", zkio.WithMetrics(m)))
	// A waiter whose znode is listed may not yet watch the one ahead: it
	// then holds without waiting. Rounds until one waited.
	for round := 0; testkit.Gather(t, reg)[`disco_handoffs_total{kind="lock"}`] == 0; round++ {
		if round == 20 {
			t.Fatal("no handoff in 20 rounds")
		}
		if _, err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { _, err := w.Lock(ctx); waited <- err }()
		testkit.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
			kids, _, err := admin.Children("/metrics/wake")
			return err == nil && len(kids) == 2
		})
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; err != nil {
			t.Fatal(err)
		}
		if err := w.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WantSeries(t, testkit.Gather(t, reg), map[string]float64{`disco_wakeups_total{kind="lock"}`: -1})
}
