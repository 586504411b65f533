package etcdio

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
)

// TestFailedLeaseCheckBlamesNoClient: a holder's key goes with its lease
// (revoked), and the lease check that follows fails (etcd does not answer
// within the attempt's bound). A failed check says nothing of who deleted
// the key: the session asks again, and the hold ends Lost for the lease,
// counted under a lease cause, never as deleted by another client.
func TestFailedLeaseCheckBlamesNoClient(t *testing.T) {
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	gl := newGatedLease(cli.Lease, 1) // the first check is held until its attempt's bound ends it
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
	// The keepalive must not be the one that finds the lease gone.
	resume := make(chan struct{})
	defer close(resume)
	testhook.PauseRenewal(s, resume)
	if _, err := admin.Revoke(ctx, s.lease); err != nil {
		t.Fatal(err)
	}
	wait(ctx, t, gl.returned[0], "the first lease check's failure")
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
