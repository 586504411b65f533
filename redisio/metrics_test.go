package redisio_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestMetrics: a registry given to WithMetrics sees the grants, waits,
// holds, handoffs and losses of the primitives (by kind and cause), and the
// session's suspensions, refreshes and loop drains, and an election's
// leader changes.
func TestMetrics(t *testing.T) {
	r, reg, m, ctx := metered(t, 30*time.Second)
	admin := newClient(t, r)
	cli, other := newClient(t, r), newClient(t, r)
	s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli, redisio.WithTTL(2*time.Second), redisio.WithMetrics(m)))
	l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, "metrics", redisio.WithSession(s)))
	// A lock on its own session, reporting to the same registry.
	w := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(other, "metrics", redisio.WithTTL(2*time.Second), redisio.WithMetrics(m)))
	events := l.Subscribe(ctx)
	wevents := w.Subscribe(ctx)

	// A grant, then a handoff to a waiter at the release.
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	type res struct {
		g   lock.Grant
		err error
	}
	waited := make(chan res, 1)
	go func() { g, err := w.Lock(ctx); waited <- res{g, err} }()
	testkit.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
		n, err := admin.ZCard(ctx, "metrics/queue").Result()
		return err == nil && n == 2
	})
	// With no message, the waiter looks again on its timer (TTL/4).
	testkit.Eventually(t, 10*time.Second, "a timed look", func() bool {
		return testkit.Gather(t, reg)[`disco_rechecks_total{kind="lock"}`] >= 1
	})
	if got := testkit.Gather(t, reg)[`disco_wakeups_total{kind="lock"}`]; got != 0 {
		t.Errorf("%v wakeups before any release, want 0: a timed look is no wakeup", got)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg := <-waited
	if wg.err != nil {
		t.Fatal(wg.err)
	}
	// Whether the release's wake message or a timed look found the grant
	// is the scheduler's: a look is counted as its timer fires, so one
	// counted before the Unlock may find the grant, and the message then
	// finds no waiter to wake. TestWakeBeforeTheWaiterRegisters counts the
	// wakeup of a handoff where nothing else can find it.

	// The waiter's session key deleted: a loss with cause lease_revoked.
	if err := admin.Del(ctx, fmt.Sprintf("disco/session/%d", wg.g.LeaseID)).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.NextOf[primitives.Lost](t, wevents, 10*time.Second)
	// The later grants come without waiting once the lost hold is cleaned
	// up: one handoff in all.
	drained := func() {
		testkit.Eventually(t, 10*time.Second, "an empty queue", func() bool {
			n, err := admin.ZCard(ctx, "metrics/queue").Result()
			return err == nil && n == 0
		})
	}
	drained()

	// A grant whose key is deleted behind its back: a loss with cause
	// key_deleted.
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, g.Key).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.NextOf[primitives.Lost](t, events, 10*time.Second)
	drained()

	// A grant on a suspended session, then Resumed.
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	testhook.PauseRenewal(s, resume)
	testkit.NextOf[primitives.Suspended](t, events, 10*time.Second)
	close(resume)
	testkit.NextOf[primitives.Resumed](t, events, 10*time.Second)

	// An election's leader change, counted while someone listens to the
	// election (here a subscription).
	e := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, "metrics-election", redisio.WithSession(s)))
	e.Subscribe(ctx)
	if err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "a leader change counted", func() bool {
		return testkit.Gather(t, reg)["disco_leader_changes_total"] >= 1
	})
	if err := s.Close(); err != nil { // Released for the lock and the term
		t.Fatal(err)
	}

	got := testkit.Gather(t, reg)
	want := map[string]float64{
		`disco_acquisitions_total{kind="lock"}`:                   4,
		`disco_acquisitions_total{kind="election"}`:               1,
		`disco_acquire_wait_seconds_count{kind="lock"}`:           4,
		`disco_handoffs_total{kind="lock"}`:                       1,
		`disco_hold_seconds_count{kind="lock"}`:                   4,
		`disco_hold_seconds_count{kind="election"}`:               1,
		`disco_losses_total{cause="key_deleted",kind="lock"}`:     1,
		`disco_losses_total{cause="lease_revoked",kind="lock"}`:   1,
		`disco_losses_total{cause="lease_expired",kind="lock"}`:   0,
		`disco_losses_total{cause="key_deleted",kind="election"}`: 0,
		`disco_suspensions_total`:                                 -1,
		`disco_keepalive_rtt_seconds_count`:                       -1,
		`disco_lease_margin_seconds_count`:                        -1,
		`disco_loop_mailbox_depth_count`:                          -1,
		`disco_leader_changes_total`:                              -1,
		// The release's wake message reached the waiter's session alone
		// (on its own channel); whether it or a timed look found the
		// grant is the scheduler's (see the handoff above).
		`disco_wake_messages_total{kind="lock"}`: -1,
		`disco_rechecks_total{kind="lock"}`:      -1,
	}
	testkit.WantSeries(t, got, want)
	if n := got[`disco_wake_messages_total{kind="lock"}`]; n != 1 {
		t.Errorf("%v wake messages, want 1: the release wakes the waiter's session only", n)
	}
	if t.Failed() {
		keys := make([]string, 0, len(got))
		for k, v := range got {
			keys = append(keys, fmt.Sprintf("%s %v", k, v))
		}
		sort.Strings(keys)
		t.Logf("series:\n%s", strings.Join(keys, "\n"))
	}
}
