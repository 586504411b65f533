package etcdio_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// A failover (the leader resigns and campaigns again, the next candidate
// leads) wakes the candidate next in line and not the others, however many
// wait on however many sessions, while nobody subscribes to a candidate's
// events or observes: each waits behind the key just ahead of its own. A
// subscriber makes its session follow who leads, and gets LeaderChanged for
// each term; once its subscription ends, failovers cost its session nothing
// again.
func TestElectionFailoverWakesTheNextAlone(t *testing.T) {
	testkit.NoLeaks(t)
	const nSessions, perSession, failovers = 5, 3, 8
	ctx := testCtx(t, 90*time.Second)
	prefix := prefixOf(t)
	reg, m := testkit.NewMetrics(t)
	var cands []election.Service
	var sessions []*etcdio.Session
	for range nSessions {
		cli := newClient(t)
		s, err := etcdio.NewSession(cli, etcdio.WithMetrics(m))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		sessions = append(sessions, s)
		for range perSession {
			cands = append(cands, newElection(t, cli, prefix, etcdio.WithSession(s)))
		}
	}
	won := make(chan int, len(cands))
	campaign := func(i int) {
		go func() {
			if err := cands[i].Campaign(ctx, fmt.Sprint(i)); err != nil {
				if ctx.Err() == nil && !errors.Is(err, primitives.ErrClosed) {
					t.Error(err)
				}
				return
			}
			won <- i
		}()
	}
	cli := newClient(t)
	queued := func() bool {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == int64(len(cands))
	}
	next := func() int {
		t.Helper()
		select {
		case i := <-won:
			return i
		case <-ctx.Done():
			t.Fatal("no candidate won")
			return -1
		}
	}
	for i := range cands {
		campaign(i)
	}
	leader := next()
	testkit.Eventually(t, 10*time.Second, "every candidate queued", queued)
	wakeups := func() float64 { return testkit.Gather(t, reg)[`disco_wakeups_total{kind="election"}`] }
	// failover n times and return the wakeups per failover.
	failover := func(n int) float64 {
		from := wakeups()
		for range n {
			if err := cands[leader].Resign(ctx); err != nil {
				t.Fatal(err)
			}
			campaign(leader)
			leader = next()
			testkit.Eventually(t, 10*time.Second, "the resigned candidate queued again", queued)
		}
		per := (wakeups() - from) / float64(n)
		t.Logf("%.1f wakeups per failover", per)
		return per
	}
	if got := failover(failovers); got > 3 {
		t.Fatalf("nobody listening: %.1f wakeups per failover with %d candidates on %d sessions, want at most 3", got, len(cands), nSessions)
	}

	// One subscriber per session: each follows who leads.
	sctx, stop := context.WithCancel(ctx)
	subs := make([]<-chan primitives.Event, nSessions)
	for i := range subs {
		subs[i] = cands[i*perSession].Subscribe(sctx)
	}
	failover(1)
	want := primitives.LeaderChanged{}
	if l, ok := cands[leader].Term(); ok {
		want = primitives.LeaderChanged{Key: l.Key, Value: l.Value, Token: l.FencingToken}
	}
	for i, sub := range subs {
		for got := (primitives.LeaderChanged{}); got != want; {
			select {
			case e := <-sub:
				if lc, ok := e.(primitives.LeaderChanged); ok {
					got = lc
				}
			case <-ctx.Done():
				t.Fatalf("subscriber %d: no LeaderChanged for %+v; last %+v", i, want, got)
			}
		}
	}
	for i, s := range sessions {
		if n, err := etcdio.FullMirrors(s); err != nil || n != 1 {
			t.Fatalf("session %d, with a subscriber: %d watches of who leads (%v), want 1", i, n, err)
		}
	}
	stop()
	// The followers close once the subscriptions' ends reach the loops;
	// then a failover wakes the next candidate alone again.
	testkit.Eventually(t, 10*time.Second, "no session follows who leads", func() bool {
		for _, s := range sessions {
			if n, err := etcdio.FullMirrors(s); err != nil || n > 0 {
				return false
			}
		}
		return true
	})
	if got := failover(failovers); got > 3 {
		t.Fatalf("subscriptions ended: %.1f wakeups per failover, want at most 3", got)
	}
}
