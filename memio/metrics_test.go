package memio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestMetrics: a session and its primitives given WithMetrics report to the
// same series as every backend's: grants, a handoff, a release, a loss by
// cause (a key deleted, the session expired), a suspension and a change
// of leader. A memio session's renewals make no round trips and it has no
// loop mailbox, so it reports neither.
func TestMetrics(t *testing.T) {
	testkit.NoLeaks(t)
	reg, m := testkit.NewMetrics(t)
	clock := memio.NewFakeClock(time.Unix(1e9, 0))
	st := memio.NewStore(memio.WithClock(clock))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	session := func() *memio.Session {
		s, err := memio.NewSession(st, memio.WithTTL(10*time.Second), memio.WithMetrics(m))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := session(), session()
	la := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/metrics/lock", memio.WithSession(a)))
	lb := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/metrics/lock", memio.WithSession(b)))
	events := la.Subscribe(ctx)
	next := func(want string) {
		t.Helper()
		select {
		case e := <-events:
			if got := kindOf(e); got != want {
				t.Fatalf("event %#v, want %s", e, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s", want)
		}
	}

	// A grant, and a handoff to a waiter when it is released.
	if _, err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	next("Acquired")
	waited := make(chan error, 1)
	go func() { _, err := lb.Lock(ctx); waited <- err }()
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool { return len(st.Keys("/metrics/lock/")) == 2 })
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next("Released")
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A grant lost to someone else's delete.
	g, err := la.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next("Acquired")
	if !st.DeleteKey(g.Key) {
		t.Fatalf("no key %s", g.Key)
	}
	next("Lost")

	// A suspension, a resumption, then a leader on the same session.
	if _, err := la.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	next("Acquired")
	a.Suspend()
	next("Suspended")
	a.Resume()
	next("Resumed")
	e := testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(st, "/metrics/election", memio.WithSession(b)))
	if err := e.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 5*time.Second, "a leader change counted", func() bool {
		return testkit.Gather(t, reg)["disco_leader_changes_total"] >= 1
	})

	// The session expires with the lock held.
	a.Expire()
	next("Lost")

	testkit.WantSeries(t, testkit.Gather(t, reg), map[string]float64{
		`disco_acquisitions_total{kind="lock"}`:                   4,
		`disco_acquisitions_total{kind="election"}`:               1,
		`disco_acquire_wait_seconds_count{kind="lock"}`:           4,
		`disco_handoffs_total{kind="lock"}`:                       1,
		`disco_hold_seconds_count{kind="lock"}`:                   4,
		`disco_losses_total{cause="key_deleted",kind="lock"}`:     1,
		`disco_losses_total{cause="lease_expired",kind="lock"}`:   1,
		`disco_losses_total{cause="key_deleted",kind="election"}`: 0,
		`disco_suspensions_total`:                                 1,
		`disco_keepalive_rtt_seconds_count`:                       0, // memio's renewals make no round trips
		`disco_lease_margin_seconds_count`:                        0,
		`disco_loop_mailbox_depth_count`:                          0, // nor has it a mailbox
		`disco_leader_changes_total`:                              -1,
	})
}

// kindOf names an ownership event's kind.
func kindOf(e primitives.Event) string {
	switch e.(type) {
	case primitives.Acquired:
		return "Acquired"
	case primitives.Released:
		return "Released"
	case primitives.Lost:
		return "Lost"
	case primitives.Suspended:
		return "Suspended"
	case primitives.Resumed:
		return "Resumed"
	}
	return "other"
}

// TestAcquireWaitOnAFakeClock: with a fake clock far from the wall clock,
// a Lock's wait is measured as the time the call took, not as the
// distance between the two clocks. Before, the wait's start came from the
// Store's clock and its end from the wall clock: one uncontended Lock
// recorded some 1.8e9 seconds.
func TestAcquireWaitOnAFakeClock(t *testing.T) {
	reg, m := testkit.NewMetrics(t)
	st := memio.NewStore(memio.WithClock(memio.NewFakeClock(time.Unix(0, 0))))
	l := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/metrics/wait", memio.WithMetrics(m)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "disco_acquire_wait_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			if sum := mt.GetHistogram().GetSampleSum(); sum < 0 || sum > 10 {
				t.Fatalf("one Lock waited %g s by the metric", sum)
			}
		}
		return
	}
	t.Fatal("no disco_acquire_wait_seconds")
}

// TestLeaderChangesOnThePrimitivesMetrics: an election given WithMetrics
// on a session given none counts its changes of leader there, as its
// grants are, and as on etcd, ZooKeeper and Redis.
func TestLeaderChangesOnThePrimitivesMetrics(t *testing.T) {
	reg, m := testkit.NewMetrics(t)
	st := memio.NewStore()
	s, err := memio.NewSession(st)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(st, "/metrics/leader", memio.WithSession(s), memio.WithMetrics(m)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// The change is told just after Campaign's answer.
	testkit.Eventually(t, 5*time.Second, "a leader change counted", func() bool {
		return testkit.Gather(t, reg)["disco_leader_changes_total"] >= 1
	})
	testkit.WantSeries(t, testkit.Gather(t, reg), map[string]float64{
		`disco_acquisitions_total{kind="election"}`: 1,
		`disco_leader_changes_total`:                1,
	})
}

// TestSuspendOfAnEndedSessionCountsNothing: Suspend of a session that was
// closed or expired does nothing, as Resume does: no suspension counted.
func TestSuspendOfAnEndedSessionCountsNothing(t *testing.T) {
	reg, m := testkit.NewMetrics(t)
	st := memio.NewStore()
	for _, end := range []func(*memio.Session){func(s *memio.Session) { s.Close() }, (*memio.Session).Expire} {
		s, err := memio.NewSession(st, memio.WithMetrics(m))
		if err != nil {
			t.Fatal(err)
		}
		end(s)
		s.Suspend()
	}
	testkit.WantSeries(t, testkit.Gather(t, reg), map[string]float64{`disco_suspensions_total`: 0})
}
