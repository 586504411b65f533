package e2e_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives/election"
)

// A Campaign whose ctx ends while the API server does not answer (its link
// paused) returns soon after, within a grace of 500 ms and a margin for a
// loaded machine, not when its withdrawal gives up (5 s). The withdrawal
// goes on without it: once the server answers again, the election's Close
// (on a shared session, whose helpers it does not own) waits for it, and
// the candidate's record is gone once Close has returned. Before, Campaign
// returned only after 5 s, its record's delete still unanswered.
func TestCampaignGivesUpWhileServerSilent(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	leader := newDisco(t, lease, "silent-leader")
	mustLead(t, ctx, leader, "l")
	cs, link := client(t)
	defer link.Heal()
	s, err := k8sio.NewSession(cs, k8sio.WithIdentity("silent-waiter"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithSession(s)))
	cctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	campaigned := make(chan error, 1)
	go func() { campaigned <- w.Campaign(cctx, "w") }()
	eventually(t, 10*time.Second, "a record while the candidate waits", func() bool {
		return len(records(t, "silent-waiter")) == 1
	})
	link.Pause()
	giveUp()
	gaveUp := time.Now()
	const bound = 2 * time.Second // the grace, 500 ms, and a margin; short of the withdrawal's 5 s
	select {
	case err := <-campaigned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign given up: %v, want context.Canceled", err)
		}
		if took := time.Since(gaveUp); took > bound {
			t.Fatalf("Campaign returned %v after its ctx ended, the API server silent; want within %v", took, bound)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Campaign given up did not return")
	}
	link.Heal()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if rs := records(t, "silent-waiter"); len(rs) != 0 {
		t.Fatalf("Close returned, the given-up Campaign's record still listed: %d", len(rs))
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// A session's Close, while the API server refuses every request, tries its
// failed resigns and deletes within one bound of 5 s for all its elections
// together, as its doc says: here a leader's resign and another election's
// waiting candidate's record. Before, the record's delete began only once
// the resign had been tried for 5 s and was then tried for 5 s of its own:
// Close took 10 s.
func TestSessionCloseBoundWhileServerRefuses(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	ctx := background(t)
	held, waited := leaseName(t.Name()+"-held"), leaseName(t.Name()+"-waited")
	other := newDisco(t, waited, "refuses-other")
	mustLead(t, ctx, other, "o")
	cs, link := client(t)
	defer link.Heal()
	const ttl = 30 * time.Second // not lost while Close runs
	s, err := k8sio.NewSession(cs, k8sio.WithIdentity("refuses-session"), k8sio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	a := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, held, k8sio.WithSession(s)))
	b := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, waited, k8sio.WithSession(s)))
	mustLead(t, ctx, a, "a")
	campaigned := make(chan error, 1)
	go func() { campaigned <- b.Campaign(ctx, "b") }()
	eventually(t, 10*time.Second, "a record while b waits", func() bool {
		return len(records(t, "refuses-session")) == 1
	})
	link.Cut()
	began := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const bound = 7 * time.Second // 5 s, and a margin for a loaded machine
	if took := time.Since(began); took > bound {
		t.Fatalf("Session.Close took %v while the API server refused every request; want within %v", took, bound)
	}
	if err := <-campaigned; err == nil {
		t.Fatal("Campaign of a closed session won")
	}
	link.Heal()
	if err := other.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
