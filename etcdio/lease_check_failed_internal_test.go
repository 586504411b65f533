package etcdio

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestFailedLeaseCheckBlamesNoClient: a holder's key goes with its lease
// (revoked), and the lease check that follows fails (etcd does not answer
// within the attempt's bound). A failed check says nothing of who deleted
// the key: the session asks again, and the hold ends Lost for the lease,
// counted under a lease cause, never as deleted by another client.
func TestFailedLeaseCheckBlamesNoClient(t *testing.T) {
	revokeWithCheckFailing(t, nil, func(ctx context.Context, gl *gatedLease, l lock.Service) {
		wait(ctx, t, gl.session.failed, "the first lease check's failure")
	})
}

// TestUnlockWhoseLeaseCheckFailsBlamesNoClient: an Unlock finds its key
// gone (with the lease, revoked) before any watch saw it, and its question
// about the lease fails. Unlock cannot say whether the hold was lost with
// the lease or deleted by someone else: it fails with neither ErrNotHeld
// nor a loss, and the session's own check ends the hold for the lease.
func TestUnlockWhoseLeaseCheckFailsBlamesNoClient(t *testing.T) {
	// No watch of the hold's key, as for a hold younger than
	// driver.HoldWatchAfter: Unlock's delete is the first to find it gone.
	unwatched := func(l lock.Service) { l.(lockService).closeMirrors() }
	revokeWithCheckFailing(t, unwatched, func(ctx context.Context, gl *gatedLease, l lock.Service) {
		if err := l.Unlock(ctx); err == nil || errors.Is(err, lock.ErrNotHeld) || errors.Is(err, primitives.ErrLost) {
			t.Errorf("Unlock whose question about the lease failed: %v, want neither ErrNotHeld nor ErrLost", err)
		}
	})
}

// revokeWithCheckFailing locks a lock, runs held on the loop, revokes the
// session's lease while its keepalive is paused, holding back every
// question about the lease (the first one ends at its attempt's bound),
// runs then, lets the questions go, and wants the hold Lost for the lease.
func revokeWithCheckFailing(t *testing.T, held func(l lock.Service), then func(ctx context.Context, gl *gatedLease, l lock.Service)) {
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	gl := newGatedLease(cli.Lease, false)
	cli.Lease = gl
	reg, m := testkit.NewMetrics(t)
	s, err := NewSession(cli, WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer gl.open() // before Close, which waits for the checks held back
	l, err := NewLock(cli, "/test/"+t.Name(), WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if held != nil {
		if _, err := call(ctx, s, func(r actor.Reply[struct{}]) {
			held(l)
			r.Answer(struct{}{}, nil)
		}); err != nil {
			t.Fatal(err)
		}
	}
	resume := make(chan struct{})
	defer close(resume)
	stopKeepalive(ctx, t, s, resume)
	if _, err := admin.Revoke(ctx, s.lease); err != nil {
		t.Fatal(err)
	}
	then(ctx, gl, l)
	gl.open()
	wantLostForTheLease(t, events, reg)
}

// wantLostForTheLease waits for the lock's Lost and fails t unless it, and
// the metrics in reg, say the lease ended it.
func wantLostForTheLease(t *testing.T, events <-chan primitives.Event, reg *prometheus.Registry) {
	t.Helper()
	lost := false
	for ev := range events {
		if ev, ok := ev.(primitives.Lost); ok {
			if !errors.Is(ev.Err, primitives.ErrLost) || strings.Contains(ev.Err.Error(), "deleted by another client") {
				t.Errorf("Lost with %v, want ErrLost for the lease", ev.Err)
			}
			lost = true
			break
		}
	}
	if !lost {
		t.Fatal("no Lost event")
	}
	got := testkit.Gather(t, reg)
	byLease := got[`disco_losses_total{cause="`+CauseLeaseRevoked+`",kind="lock"}`] + got[`disco_losses_total{cause="`+CauseLeaseExpired+`",kind="lock"}`]
	if deleted := got[`disco_losses_total{cause="`+CauseKeyDeleted+`",kind="lock"}`]; deleted != 0 || byLease != 1 {
		t.Fatalf("losses: %v key_deleted, %v by the lease; want 0 and 1", deleted, byLease)
	}
}
