package etcdio_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

func newElection(t testing.TB, cli *clientv3.Client, prefix string, opts ...etcdio.Option) election.Service {
	t.Helper()
	return testkit.ClosedAtEnd[election.Service](t)(etcdio.NewElection(cli, prefix, opts...))
}

func mustCampaign(t testing.TB, e election.Service, value string) election.Leadership {
	t.Helper()
	if err := e.Campaign(testCtx(t, 10*time.Second), value); err != nil {
		t.Fatal(err)
	}
	l, ok := e.Term()
	if !ok || l.Value != value {
		t.Fatalf("Term after Campaign = %+v, %v", l, ok)
	}
	return l
}

// campaignAll starts a Campaign for each candidate and returns the channel
// on which each winner's index arrives. When t ends, the candidates are
// closed and the campaigns waited for.
func campaignAll(t *testing.T, cands []election.Service) <-chan int {
	won := make(chan int, len(cands))
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, e := range cands {
			e.Close()
		}
		wg.Wait()
	})
	for i, e := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := testCtx(t, 20*time.Second)
			if err := e.Campaign(ctx, "cand"); err != nil {
				if ctx.Err() == nil && !errors.Is(err, primitives.ErrClosed) && !errors.Is(err, primitives.ErrLost) {
					t.Error(err)
				}
				return
			}
			won <- i
		}()
	}
	return won
}

func TestElectionSingleLeaderAndFailover(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	cands := make([]election.Service, 5)
	for i := range cands {
		cands[i] = newElection(t, newClient(t), prefix, etcdio.WithTTL(10*time.Second))
	}
	won := campaignAll(t, cands)
	first := <-won
	testkit.Eventually(t, 5*time.Second, "every candidate's key", func() bool { return countKeys(t, cli, prefix) == 5 })
	select {
	case i := <-won:
		t.Fatalf("candidates %d and %d both lead", first, i)
	default:
	}
	term, _ := cands[first].Term()
	ld, err := cands[(first+1)%5].Leader(testCtx(t, 5*time.Second))
	if err != nil || ld != term {
		t.Fatalf("Leader() = %+v, %v; want the winner's term %+v", ld, err, term)
	}
	for i, e := range cands {
		if _, leading := e.Term(); leading != (i == first) {
			t.Fatalf("candidate %d: Term leading = %v", i, leading)
		}
	}

	// Close the leader: the next one leads within a second, not the TTL.
	start := time.Now()
	if err := cands[first].Close(); err != nil {
		t.Fatal(err)
	}
	second := <-won
	if d := time.Since(start); d > time.Second {
		t.Fatalf("failover after Close took %v", d)
	}
	term2, _ := cands[second].Term()
	if term2.Token() <= term.Token() {
		t.Fatalf("token went from %d to %d", term.Token(), term2.Token())
	}

	// Revoke the next leader's lease: the next one leads within TTL + 1s.
	start = time.Now()
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(term2.LeaseID)); err != nil {
		t.Fatal(err)
	}
	third := <-won
	if d := time.Since(start); d > 11*time.Second {
		t.Fatalf("failover after revoke took %v", d)
	}
	select {
	case <-cands[second].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("revoked leader's service not done")
	}
	if _, leading := cands[second].Term(); leading {
		t.Fatal("revoked leader still reports a term")
	}
	term3, _ := cands[third].Term()
	if term3.Token() <= term2.Token() {
		t.Fatalf("token went from %d to %d", term2.Token(), term3.Token())
	}
}

func TestElectionProclaimKeepsToken(t *testing.T) {
	testkit.NoLeaks(t)
	e := newElection(t, newClient(t), prefixOf(t))
	ctx := testCtx(t, 10*time.Second)
	if err := e.Proclaim(ctx, "x"); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Proclaim when not leading: %v", err)
	}
	if err := e.Resign(ctx); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Resign when not leading: %v", err)
	}
	l := mustCampaign(t, e, "v1")
	obs := e.Observe(ctx)
	if got := <-obs; got != l {
		t.Fatalf("Observe first = %+v, want %+v", got, l)
	}
	if err := e.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	got := <-obs
	if got.Value != "v2" || got.Token() != l.Token() || got.Key != l.Key {
		t.Fatalf("after Proclaim observed %+v; want value v2 with token %d", got, l.Token())
	}
	if term, _ := e.Term(); term.Value != "v2" || term.Token() != l.Token() {
		t.Fatalf("Term after Proclaim = %+v", term)
	}
	if ld, err := e.Leader(ctx); err != nil || ld.Value != "v2" {
		t.Fatalf("Leader after Proclaim = %+v, %v", ld, err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-obs; got.Key != "" {
		t.Fatalf("after Resign observed %+v, want no leader", got)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader with nobody leading: %v", err)
	}
}

func TestElectionObserveSeesEveryTerm(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	observer := newElection(t, newClient(t), prefix)
	obs := observer.Observe(testCtx(t, 20*time.Second))
	if got := <-obs; got.Key != "" {
		t.Fatalf("first observation %+v, want no leader", got)
	}
	var want []election.Leadership
	for i := 0; i < 3; i++ {
		e := newElection(t, newClient(t), prefix)
		want = append(want, mustCampaign(t, e, "leader"))
		if got := <-obs; got != want[i] {
			t.Fatalf("observed %+v, want term %d %+v", got, i, want[i])
		}
		if err := e.Resign(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := <-obs; got.Key != "" {
			t.Fatalf("observed %+v after resign, want no leader", got)
		}
	}
	for i := 1; i < len(want); i++ {
		if want[i].Token() <= want[i-1].Token() {
			t.Fatalf("tokens not increasing: %d then %d", want[i-1].Token(), want[i].Token())
		}
	}
}

func TestElectionCampaignCancelled(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	leader := newElection(t, cli, prefix)
	mustCampaign(t, leader, "l")
	e := newElection(t, newClient(t), prefix)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Campaign(ctx, "c") }()
	testkit.Eventually(t, 5*time.Second, "candidate key", func() bool { return countKeys(t, cli, prefix) == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Campaign: %v", err)
	}
	if n := countKeys(t, cli, prefix); n != 1 {
		t.Fatalf("%d keys after cancelled Campaign, want 1", n)
	}
	if _, leading := e.Term(); leading {
		t.Fatal("cancelled candidate reports a term")
	}
	// The leader resigning must not make the withdrawn candidate lead.
	if err := leader.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, cli, prefix); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestElectionEventsAndLead(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	e := newElection(t, cli, prefix)
	events := e.Subscribe(testCtx(t, 10*time.Second))
	led := mustCampaign(t, e, "me")
	var sawAcquired, sawLeader bool
	for !(sawAcquired && sawLeader) {
		switch ev := nextEvent(t, events).(type) {
		case primitives.Acquired:
			sawAcquired = ev.Key == led.Key && ev.Token == led.Token()
		case primitives.LeaderChanged:
			sawLeader = ev.Key == led.Key && ev.Token == led.Token() && ev.Value == "me"
		default:
			t.Fatalf("unexpected %#v while campaigning", ev)
		}
	}
	if err := e.Resign(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for sawReleased := false; !sawReleased; {
		switch ev := nextEvent(t, events).(type) {
		case primitives.Released:
			sawReleased = ev.Key == led.Key && ev.Token == led.Token()
		case primitives.LeaderChanged:
		default:
			t.Fatalf("unexpected %#v after Resign", ev)
		}
	}

	var inLead election.Leadership
	err := election.Lead(testCtx(t, 10*time.Second), e, "lead", func(ctx context.Context, l election.Leadership) error {
		inLead = l
		return nil
	})
	if err != nil || inLead.Value != "lead" || inLead.Token() <= led.Token() {
		t.Fatalf("Lead: %v, term %+v", err, inLead)
	}
	if _, leading := e.Term(); leading {
		t.Fatal("still leading after Lead returned")
	}

	// Lead's context ends when the term is lost.
	err = election.Lead(testCtx(t, 10*time.Second), e, "again", func(ctx context.Context, l election.Leadership) error {
		if _, err := cli.Delete(context.Background(), l.Key); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Lead with a lost term returned %v, want ErrLost", err)
	}
	if e.Err() != nil {
		t.Fatalf("service done after its key alone was deleted: %v", e.Err())
	}
}

func TestElectionInteropConcurrency(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	sess := etcdSession(t, cli)
	theirs := concurrency.NewElection(sess, prefix)
	ours := newElection(t, newClient(t), prefix)
	ctx := testCtx(t, 10*time.Second)

	l := mustCampaign(t, ours, "disco")
	resp, err := theirs.Leader(ctx)
	if err != nil || string(resp.Kvs[0].Key) != l.Key {
		t.Fatalf("etcd's Election sees leader %v, %v; want %s", resp, err, l.Key)
	}
	won := make(chan error, 1)
	go func() { won <- theirs.Campaign(ctx, "etcd") }()
	testkit.Eventually(t, 5*time.Second, "etcd candidate key", func() bool { return countKeys(t, cli, prefix) == 2 })
	if err := ours.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	ld, err := ours.Leader(ctx)
	if err != nil || ld.Key != theirs.Key() || ld.Value != "etcd" {
		t.Fatalf("disco sees leader %+v, %v; want etcd's %s", ld, err, theirs.Key())
	}
	if ld.Token() <= l.Token() {
		t.Fatalf("etcd leader's token %d not above disco's %d", ld.Token(), l.Token())
	}
	if err := theirs.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestElectionGuardRejectsPreviousLeader(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	g := guard.New()
	var terms []election.Leadership
	for i := 0; i < 3; i++ {
		e := newElection(t, newClient(t), prefix)
		l := mustCampaign(t, e, "l")
		if err := g.Check(l.Token()); err != nil {
			t.Fatalf("leader %d rejected: %v", i, err)
		}
		terms = append(terms, l)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, old := range terms[:2] {
		if err := g.Check(old.Token()); !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("previous leader's token %d accepted after %d: %v", old.Token(), g.Mark(), err)
		}
	}
}

// TestElectionFailoverOnExpiry pauses the leader's session, as a long GC
// pause or a suspended VM would: its keepalives stop, its lease expires, and
// the next candidate leads within the TTL plus a second.
func TestElectionFailoverOnExpiry(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	const ttl = 2 * time.Second
	cli := newClient(t)
	s, err := etcdio.NewSession(cli, etcdio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	leader := newElection(t, cli, prefix, etcdio.WithSession(s))
	old := mustCampaign(t, leader, "paused")
	next := newElection(t, newClient(t), prefix)
	won := make(chan error, 1)
	go func() { won <- next.Campaign(testCtx(t, 20*time.Second), "next") }()
	testkit.Eventually(t, 5*time.Second, "second candidate's key", func() bool { return countKeys(t, cli, prefix) == 2 })

	resume := make(chan struct{})
	start := time.Now()
	testhook.PauseSession(s, resume)
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > ttl+time.Second {
		t.Fatalf("failover after the leader's lease expired took %v, want within TTL %v + 1s", d, ttl)
	}
	term, _ := next.Term()
	if term.Token() <= old.Token() {
		t.Fatalf("token went from %d to %d", old.Token(), term.Token())
	}
	// The paused leader wakes up: its session is lost, it no longer leads.
	close(resume)
	select {
	case <-leader.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("paused leader's service not done after it woke up past its lease")
	}
	if _, leading := leader.Term(); leading {
		t.Fatal("paused leader still reports its term")
	}
	if err := leader.Proclaim(context.Background(), "zombie"); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Proclaim by the expired leader: %v, want ErrLost", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestElectionResignTerm(t *testing.T) {
	testkit.NoLeaks(t)
	e := newElection(t, newClient(t), prefixOf(t))
	ctx := testCtx(t, 10*time.Second)
	first := mustCampaign(t, e, "1")
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := mustCampaign(t, e, "2")
	tr, ok := e.(election.TermResigner)
	if !ok {
		t.Fatal("etcdio's election does not implement election.TermResigner")
	}
	if err := tr.ResignTerm(ctx, first); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("ResignTerm of an ended term: %v, want ErrNotLeader", err)
	}
	if term, leading := e.Term(); !leading || term != second {
		t.Fatalf("a stale ResignTerm ended the later term: %+v, %v", term, leading)
	}
	if err := tr.ResignTerm(ctx, second); err != nil {
		t.Fatal(err)
	}
	if _, leading := e.Term(); leading {
		t.Fatal("still leading after ResignTerm")
	}
}
