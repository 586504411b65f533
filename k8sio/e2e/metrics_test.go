package e2e_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// TestMetrics: a session and its election given WithMetrics report a
// term and its release, a handoff (a term won after waiting behind
// another candidate's), a loss (the Lease deleted by someone else), a
// suspension (the Lease's requests unanswered), acknowledged renewals,
// the loop's mailbox and a change of leader to the registry's series; and
// the renewal that ends a Lease's suspension reports the time that was
// left on that Lease, not on the session (which the server's answers to
// its version asks kept confirming meanwhile).
func TestMetrics(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	ctx := background(t)
	reg, m := newMetrics(t)
	// Suspended after 3 s unrenewed, Lost after 12; renewals and version
	// asks every 2 s.
	const ttl, suspendAfter = 12 * time.Second, 3 * time.Second
	lease := leaseName(t.Name())
	cs, link := client(t)
	t.Cleanup(link.Heal)
	s, err := k8sio.NewSession(cs, k8sio.WithIdentity("metrics"), k8sio.WithTTL(ttl), k8sio.WithSuspendAfter(0.25), k8sio.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithSession(s)))
	other := closedAtEnd[election.Service](t)(k8sio.NewElection(admin(), namespace, lease, k8sio.WithIdentity("metrics-other"), k8sio.WithTTL(ttl)))
	events := e.Subscribe(ctx)

	// A term and its release.
	mustLead(t, ctx, e, "first")
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// A handoff: e waits behind the other candidate's term.
	mustLead(t, ctx, other, "other")
	won := make(chan error, 1)
	go func() { won <- e.Campaign(ctx, "second") }()
	eventually(t, 10*time.Second, "e waiting as a candidate", func() bool {
		list, err := admin().CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: k8sio.LabelCandidate + "=true"})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range list.Items {
			if h := l.Spec.HolderIdentity; h != nil && *h == "metrics" {
				return true
			}
		}
		return false
	})
	if err := other.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	// A term lost to someone else's delete of the Lease.
	if err := admin().CoordinationV1().Leases(namespace).Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nextOf[primitives.Lost](t, events, 20*time.Second)
	// A suspension: the Lease's requests go unanswered until healed, while
	// the session's version asks go through.
	mustLead(t, ctx, e, "third")
	link.PauseMatching(touches(lease))
	nextOf[primitives.Suspended](t, events, 20*time.Second)
	// Healed just after a version ask was answered, so that the renewal
	// the heal lets through is the one observation until Resumed.
	const count, sum = "disco_lease_margin_seconds_count", "disco_lease_margin_seconds_sum"
	before := series(t, reg)[count]
	eventually(t, 10*time.Second, "a version ask answered", func() bool { return series(t, reg)[count] > before })
	s0 := series(t, reg)
	link.Heal()
	nextOf[primitives.Resumed](t, events, 20*time.Second)
	s1 := series(t, reg)
	if n := s1[count] - s0[count]; n == 1 {
		// The Lease went unrenewed for at least suspendAfter, so at most
		// 9 s were left on it; the session had just been confirmed, with
		// nearly 12 s left.
		if margin := s1[sum] - s0[sum]; margin > (ttl - suspendAfter).Seconds() {
			t.Errorf("margin of the renewal that resumed the Lease: %.2fs, want at most %v (the Lease's, not the session's)", margin, ttl-suspendAfter)
		}
	} else {
		t.Errorf("%v renewals acknowledged between the heal and Resumed, want 1", n)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}

	eventually(t, 10*time.Second, "a leader change", func() bool {
		return series(t, reg)["disco_leader_changes_total"] >= 1
	})
	got := series(t, reg)
	for name, want := range map[string]float64{
		`disco_acquisitions_total{kind="election"}`:               3,
		`disco_acquire_wait_seconds_count{kind="election"}`:       3,
		`disco_handoffs_total{kind="election"}`:                   1,
		`disco_hold_seconds_count{kind="election"}`:               3,
		`disco_losses_total{cause="key_deleted",kind="election"}`: 1,
		`disco_suspensions_total`:                                 -1, // the paused Lease; a loaded machine may add more
		`disco_leader_changes_total`:                              -1,
		`disco_keepalive_rtt_seconds_count`:                       -1,
		`disco_lease_margin_seconds_count`:                        -1,
		`disco_loop_mailbox_depth_count`:                          -1,
	} { // a negative want: at least 1
		if v := got[name]; (want < 0 && v < 1) || (want >= 0 && v != want) {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}
