package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/redisio"
)

// TestLeaderBeforeCampaignReturns: Leader is whoever leads in Redis now,
// so it can name a candidate whose Campaign has not returned yet (the
// resigning leader's script granted it; its own process has not looked).
// The law: the token Leader reports for a candidate is the token of that
// candidate's term once its Campaign returns, with the same key.
func TestLeaderBeforeCampaignReturns(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, r)
	elect := func() (election.Service, *redisio.Session) {
		cli := newClient(t, r)
		s, err := redisio.NewSession(cli, redisio.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		e, err := redisio.NewElection(cli, "leader-early", redisio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e, s
	}
	first, _ := elect()
	next, nextSession := elect()
	watcher, _ := elect()
	if err := first.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	won := make(chan error, 1)
	go func() { won <- next.Campaign(ctx, "next") }()
	testkit.Eventually(t, 10*time.Second, "next queued", func() bool {
		n, err := admin.ZCard(ctx, "leader-early/queue").Result()
		return err == nil && n == 2
	})
	resume := make(chan struct{})
	testhook.PauseSession(nextSession, resume) // next's process cannot notice it leads
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := watcher.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Value != "next" {
		t.Fatalf("Leader after the first resigned = %+v, want next", l)
	}
	select {
	case err := <-won:
		t.Fatalf("next's Campaign returned (%v) while its session was paused", err)
	default:
	}
	if _, leading := next.Term(); leading {
		t.Fatal("next's Term says it leads while its session is paused")
	}
	close(resume)
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	term, leading := next.Term()
	if !leading || term.Key != l.Key || term.FencingToken != l.FencingToken || term.Created != l.Created {
		t.Fatalf("next's term %+v (leading %v), but Leader reported %+v before its Campaign returned", term, leading, l)
	}
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
