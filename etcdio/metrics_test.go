package etcdio_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
)

// A scripted sequence (lock, handoff, a key deleted behind a holder, a
// revoked lease, an election) and the counters it must leave.
func TestMetricsCountTheScript(t *testing.T) {
	testkit.NoLeaks(t)
	reg := prometheus.NewRegistry()
	m, err := etcdio.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcdio.NewMetrics(reg); err == nil {
		t.Fatal("a second NewMetrics on one registry succeeded")
	}
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := prefixOf(t)
	a := newLock(t, cli, prefix, etcdio.WithMetrics(m))
	b := newLock(t, newClient(t), prefix, etcdio.WithMetrics(m))

	// 1. a locks uncontended, b waits behind it: two acquisitions, one handoff.
	ga := mustLock(t, a)
	got := make(chan error, 1)
	go func() { _, err := b.Lock(ctx); got <- err }()
	testkit.Eventually(t, 5*time.Second, "b queued", func() bool { return countKeys(t, cli, prefix) == 2 })
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// 2. b's key is deleted by someone else: a loss with cause key_deleted.
	events := b.Subscribe(ctx)
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("keys: %v %v", resp, err)
	}
	if _, err := cli.Delete(ctx, string(resp.Kvs[0].Key)); err != nil {
		t.Fatal(err)
	}
	waitLost(t, events)
	// 3. a locks again and its lease is revoked: cause lease_revoked.
	events = a.Subscribe(ctx)
	ga = mustLock(t, a)
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(ga.LeaseID)); err != nil {
		t.Fatal(err)
	}
	waitLost(t, events)
	// 4. An election: one term, leader changes seen.
	e := newElection(t, cli, prefixOf(t)+"-e", etcdio.WithMetrics(m))
	obs := e.Observe(ctx)
	mustCampaign(t, e, "v")
	for l := range obs { // the change to this candidate, as the loop saw it
		if l.Key != "" {
			break
		}
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	for l := range obs { // and to nobody
		if l.Key == "" {
			break
		}
	}

	if got := value(t, reg, "disco_acquisitions_total", "kind", "lock"); got != 3 {
		t.Errorf("lock acquisitions %v, want 3", got)
	}
	if got := value(t, reg, "disco_handoffs_total", "kind", "lock"); got != 1 {
		t.Errorf("lock handoffs %v, want 1", got)
	}
	if got := value(t, reg, "disco_acquisitions_total", "kind", "election"); got != 1 {
		t.Errorf("election acquisitions %v, want 1", got)
	}
	losses := map[string]float64{
		etcdio.CauseKeyDeleted:   value(t, reg, "disco_losses_total", "cause", etcdio.CauseKeyDeleted),
		etcdio.CauseLeaseRevoked: value(t, reg, "disco_losses_total", "cause", etcdio.CauseLeaseRevoked),
		etcdio.CauseLeaseExpired: value(t, reg, "disco_losses_total", "cause", etcdio.CauseLeaseExpired),
	}
	leaderChanges := value(t, reg, "disco_leader_changes_total", "", "")
	if losses[etcdio.CauseKeyDeleted] != 1 || losses[etcdio.CauseLeaseRevoked] != 1 || losses[etcdio.CauseLeaseExpired] != 0 {
		t.Errorf("losses by cause %v, want one key_deleted and one lease_revoked", losses)
	}
	if leaderChanges < 2 {
		t.Errorf("leader changes %v, want at least 2 (to the candidate, then to none)", leaderChanges)
	}
	if n := testutil.CollectAndCount(reg, "disco_keepalive_rtt_seconds", "disco_loop_mailbox_depth"); n != 2 {
		t.Errorf("%d keepalive/loop series, want 2", n)
	}
	// b woke on the delete event of a's key; the election's watch saw its
	// own key come and go. etcd has no timed looks and no wake messages.
	testkit.WantSeries(t, testkit.Gather(t, reg), map[string]float64{
		`disco_wakeups_total{kind="lock"}`:     -1,
		`disco_wakeups_total{kind="election"}`: -1,
	})
	for _, series := range []string{"disco_rechecks_total", "disco_wake_messages_total"} {
		if n := testutil.CollectAndCount(reg, series); n != 0 {
			t.Errorf("%d %s series on etcd, want none", n, series)
		}
	}
}

// value sums the counters of family name whose label has value (all of
// them if label is "").
func value(t *testing.T, reg *prometheus.Registry, name, label, val string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			match := label == ""
			for _, l := range mt.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == val
			}
			if match {
				sum += mt.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func waitLost(t *testing.T, events <-chan primitives.Event) {
	t.Helper()
	for {
		select {
		case ev := <-events:
			if l, ok := ev.(primitives.Lost); ok {
				if !errors.Is(l.Err, primitives.ErrLost) {
					t.Fatalf("Lost.Err %v", l.Err)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no Lost")
		}
	}
}
