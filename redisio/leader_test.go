package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
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

// A Resign whose ctx ends while its request waits for the session's loop
// leaves the term standing and resignable: a retried Resign ends it, and
// the name is free for the next candidate. Before, the loop marked the
// abandoned release in flight and nothing settled it: the term stayed,
// Redis still named it leader, and every Resign, Proclaim and Campaign
// after it failed (ErrNotLeader, "a release is in flight") until Close.
func TestResignGivenUpBeforeTheLoopKeepsTheTerm(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, "given-up-resign", redisio.WithSession(s)))
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	giveUpWhileLoopPaused(t, s, "Resign", e.Resign)
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("retried Resign = %v, want nil", err)
	}
	if _, leading := e.Term(); leading {
		t.Fatal("still leading after the retried Resign")
	}
	if err := e.Campaign(ctx, "b"); err != nil {
		t.Fatalf("Campaign after the Resign: %v", err)
	}
}

// A release given up before the loop ran it sent nothing to Redis: a later
// deletion of the hold's key by someone else is a loss, told as Lost, not
// taken for the release's own deletion (Released).
func TestGivenUpReleaseThenKeyDeletedIsLost(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, cli := newClient(t, r), newClient(t, r)
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, "given-up-unlock", redisio.WithSession(s)))
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	giveUpWhileLoopPaused(t, s, "Unlock", l.Unlock)
	if err := admin.Del(ctx, g.Key).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e := <-events:
			switch e.(type) {
			case primitives.Lost:
				return
			case primitives.Released:
				t.Fatal("the key deleted by another client after an Unlock that sent nothing: Released, want Lost")
			}
		case <-ctx.Done():
			t.Fatal("no Lost after the hold's key was deleted")
		}
	}
}

// giveUpWhileLoopPaused calls call with a ctx that ends while s's loop is
// paused before the call's request, and fails t unless call returns
// DeadlineExceeded.
func giveUpWhileLoopPaused(t *testing.T, s *redisio.Session, what string, call func(context.Context) error) {
	t.Helper()
	resume := make(chan struct{})
	testhook.PauseSession(s, resume) // the loop stops at its next wake-up: the call's request
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := call(ctx)
	cancel()
	close(resume)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s whose ctx ended before the loop ran it = %v, want DeadlineExceeded", what, err)
	}
}
