package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// TestElection checks every promise of election.Service and election.Lead
// against b, and of election.TermResigner where the Service offers it, one
// parallel subtest per law:
//
//   - OneLeaderAndFailover: one leader, agreed by all; after its Close the
//     next leads at once, after a killed session the one after; tokens rise
//     and a guard fences each former leader.
//   - ProclaimKeepsTerm: ErrNotLeader unless leading; Proclaim changes the
//     value, not the term; after Resign nobody leads (ErrNoLeader).
//   - ObserveEveryTerm: no leader as a zero Leadership, then each term and
//     each gap, tokens rising.
//   - ObserveStartsWithCurrentState: the first value is the state when Observe
//     was called, for any Service.
//   - SecondCampaignWaits: a second Campaign of the leader waits for its term
//     to end.
//   - CancelledCampaignLeavesNothing: a Campaign past its deadline returns
//     ctx.Err() and leaves no candidacy.
//   - Events: Acquired, Released and LeaderChanged (own, others', none).
//   - SlowSubscriberMissesNothing: every Acquired and Released, and the latest
//     LeaderChanged.
//   - Lead: fn gets this candidate's own term; resigns after; a failed
//     Campaign skips fn.
//   - DeleteKey: Lost, Lead's context cancelled with ErrLost, the Service stays
//     usable; the next term fences the lost one.
//   - ResignAfterKeyDeleted: every observer, the candidate's own too, goes on
//     to no leader and the next leader; a new Observe does not stall.
//   - KillSession: Lost, Lead's context cancelled, ErrLost everywhere, Observe
//     closed; the successor fences the zombie.
//   - CloseReleasesPromptly: the next candidate does not wait for a TTL;
//     ErrClosed everywhere; Observe channels close, also one asked of a fresh
//     Service.
//   - ConcurrentCloses: of two Closes of the leader at once, one returns nil
//     and the other ErrClosed, each only once the term is resigned.
//   - PausedLeaderIsFenced: the next candidate leads after the TTL; the paused
//     leader sees Lost when it resumes.
//   - ResignTerm: ends only the term it names by Created.
//   - BadNames: every bad name is refused with ErrInvalidArgument.
//   - CancelledAtAnyMoment: Campaigns whose contexts end at any step return
//     ctx.Err() itself, and leave nothing.
//   - WaiterKeyDeleted: a waiting candidate whose key is deleted fails with
//     ErrLost within half a TTL.
//   - OversizedValue: a value over Backend.MaxValue is refused at once with
//     ErrInvalidArgument; nothing is written.
//   - GrantTokenNow: a primitives.GrantToken stamps the term's token as soon
//     as Campaign returns and none once Resign returns.
//   - ObserveNeverRepeats: an observer that does not read while leaders
//     come and go may miss states, never the latest, and never gets one
//     state twice in a row; every Observe law checks the latter too.
//   - EndedContextChangesNothing: Proclaim, Resign and ResignTerm given a
//     context that has ended fail with its error and keep the term and its
//     value.
//   - NilContext: every call, election.Lead included, given a nil context
//     fails with ErrInvalidArgument (Observe and Subscribe: a channel
//     closed at once), writes nothing and keeps the term and its value.
func TestElection(t *testing.T, b Backend) {
	t.Helper()
	b.checkElection(t)
	law(t, "OneLeaderAndFailover", func(t *testing.T) { electOneLeader(t, b) })
	law(t, "ProclaimKeepsTerm", func(t *testing.T) { electProclaim(t, b) })
	law(t, "ObserveEveryTerm", func(t *testing.T) { electObserve(t, b) })
	law(t, "ObserveNeverRepeats", func(t *testing.T) { electObserveNoRepeat(t, b) })
	law(t, "ObserveStartsWithCurrentState", func(t *testing.T) { electObserveFirst(t, b) })
	law(t, "SecondCampaignWaits", func(t *testing.T) { electSecondCampaign(t, b) })
	law(t, "CancelledCampaignLeavesNothing", func(t *testing.T) { electCancelled(t, b) })
	law(t, "Events", func(t *testing.T) { electEvents(t, b) })
	law(t, "SlowSubscriberMissesNothing", func(t *testing.T) { electSlowSubscriber(t, b) })
	law(t, "Lead", func(t *testing.T) { electLead(t, b) })
	law(t, "DeleteKey", func(t *testing.T) { electDeleteKey(t, b) })
	law(t, "ResignAfterKeyDeleted", func(t *testing.T) { electResignKeyGone(t, b) })
	law(t, "KillSession", func(t *testing.T) { electKillSession(t, b) })
	law(t, "CloseReleasesPromptly", func(t *testing.T) { electClose(t, b) })
	law(t, "ConcurrentCloses", func(t *testing.T) { electConcurrentCloses(t, b) })
	law(t, "PausedLeaderIsFenced", func(t *testing.T) { electPause(t, b) })
	law(t, "ResignTerm", func(t *testing.T) { electResignTerm(t, b) })
	law(t, "BadNames", func(t *testing.T) { badNames(t, b, "election") })
	law(t, "OversizedValue", func(t *testing.T) { electOversizedValue(t, b) })
	law(t, "CancelledAtAnyMoment", func(t *testing.T) { electCancelledAnyMoment(t, b) })
	law(t, "WaiterKeyDeleted", func(t *testing.T) { electWaiterKeyDeleted(t, b) })
	law(t, "GrantTokenNow", func(t *testing.T) { electGrantTokenNow(t, b) })
	law(t, "EndedContextChangesNothing", func(t *testing.T) { electEndedContext(t, b) })
	law(t, "NilContext", func(t *testing.T) { electNilContext(t, b) })
}

// mustCampaign campaigns and returns the term, checked against Term.
func mustCampaign(t *testing.T, b Backend, e election.Service, value string) election.Leadership {
	t.Helper()
	ok(t, e.Campaign(b.ctx(t), value), "Campaign")
	l, leading := e.Term()
	if !leading || l.Value != value || l.Key == "" || l.Created == 0 {
		t.Fatalf("Term after Campaign(%q) = %+v, %v", value, l, leading)
	}
	return l
}

// sameTerm reports whether a and b name the same term with the same value.
// (LeaseID is the backend's business.)
func sameTerm(a, b election.Leadership) bool {
	return a.Key == b.Key && a.Value == b.Value && a.FencingToken == b.FencingToken && a.Created == b.Created
}

// noLeader is what Observe delivers while nobody leads.
var noLeader = election.Leadership{}

// observer reads an Observe channel, checking that leaders' tokens never
// go back and that no state comes twice in a row.
type observer struct {
	ch   <-chan election.Leadership
	last fencing.Token
	prev *election.Leadership
}

// observe calls e.Observe, which must return within the patience (the
// call itself may wait for the backend, never indefinitely).
func observe(t *testing.T, b Backend, e election.Service) *observer {
	t.Helper()
	ctx := b.ctx(t)
	ch := awaitOK(t, b, start(func() (<-chan election.Leadership, error) { return e.Observe(ctx), nil }), "Observe to return")
	return &observer{ch: ch}
}

// next returns the next observation.
func (o *observer) next(t *testing.T, b Backend) election.Leadership {
	t.Helper()
	select {
	case l, ok := <-o.ch:
		if !ok {
			t.Fatal("Observe channel closed")
		}
		if l.Key != "" {
			if l.Token() < o.last {
				t.Fatalf("observed token %d after %d: leaders' tokens went back", l.Token(), o.last)
			}
			o.last = l.Token()
		}
		if o.prev != nil && sameTerm(*o.prev, l) {
			t.Fatalf("observed %+v twice in a row", l)
		}
		o.prev = &l
		return l
	case <-time.After(b.patience()):
		t.Fatalf("nothing observed within %v", b.patience())
	}
	panic("unreachable")
}

// first checks the first observation: the state when Observe was called.
func (o *observer) first(t *testing.T, b Backend, want election.Leadership) {
	t.Helper()
	if got := o.next(t, b); !sameTerm(got, want) {
		t.Fatalf("first observation %+v, want %+v", got, want)
	}
}

// until reads observations until one is want; a slow reader may miss
// states in between, never the latest.
func (o *observer) until(t *testing.T, b Backend, want election.Leadership) {
	t.Helper()
	for got := o.next(t, b); !sameTerm(got, want); got = o.next(t, b) {
	}
}

// wonBy campaigns with every candidate in the background; the index of each
// that wins arrives on the channel (with a nil error), or its failure.
func wonBy(ctx context.Context, cands []election.Service) <-chan outcome[int] {
	won := make(chan outcome[int], len(cands))
	for i, e := range cands {
		go func() { won <- outcome[int]{i, e.Campaign(ctx, fmt.Sprint("candidate ", i))} }()
	}
	return won
}

// winner waits for the next candidate to win.
func winner(t *testing.T, b Backend, won <-chan outcome[int], cands []election.Service) (int, election.Leadership) {
	t.Helper()
	i, err := await(t, b, won, "a candidate to win")
	ok(t, err, fmt.Sprint("Campaign of candidate ", i))
	l, leading := cands[i].Term()
	if !leading {
		t.Fatalf("candidate %d won but has no term", i)
	}
	return i, l
}

// electOneLeader: of candidates campaigning together exactly one leads and
// everyone agrees who; when it closes the next leads at once, and when the
// next one's session dies the one after leads; tokens go up, and a guard
// rejects each former leader.
func electOneLeader(t *testing.T, b Backend) {
	cands := make([]election.Service, 4)
	for i := range cands {
		cands[i] = b.NewElection(t, name(t))
	}
	ctx := b.ctx(t)
	gd := guard.New()
	won := wonBy(ctx, cands)
	first, l1 := winner(t, b, won, cands)
	ok(t, gd.Check(l1.Token()), "guard admits the first leader")
	notYet(t, won, "a second leader")
	for i, e := range cands {
		if _, leading := e.Term(); leading != (i == first) {
			t.Fatalf("candidate %d: Term leading = %v while %d leads", i, leading, first)
		}
		ld, err := e.Leader(ctx)
		ok(t, err, "Leader")
		if !sameTerm(ld, l1) {
			t.Fatalf("candidate %d sees leader %+v, want %+v", i, ld, l1)
		}
	}

	ok(t, cands[first].Close(), "Close of the leader")
	closedAt := time.Now()
	second, l2 := winner(t, b, won, cands)
	if d := time.Since(closedAt); d > b.prompt() {
		t.Fatalf("next leader %v after the leader's Close, want within %v (not after a TTL of %v)", d, b.prompt(), b.TTL)
	}
	fenced(t, gd, l1.Token(), l2.Token())

	b.KillSession(t, cands[second])
	_, l3 := winner(t, b, won, cands)
	wantEnded(t, b, cands[second], primitives.ErrLost)
	if _, leading := cands[second].Term(); leading {
		t.Fatal("a leader whose session died still has a term")
	}
	fenced(t, gd, l2.Token(), l3.Token())
}

// electProclaim: Proclaim and Resign fail with ErrNotLeader unless leading;
// Proclaim changes the value, never the term or its token, and everyone sees
// it; after Resign nobody leads.
func electProclaim(t *testing.T, b Backend) {
	e, other := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	errIs(t, e.Proclaim(ctx, "x"), election.ErrNotLeader, "Proclaim when not leading")
	errIs(t, e.Resign(ctx), election.ErrNotLeader, "Resign when not leading")
	errIs(t, takeErr(e.Leader(ctx)), election.ErrNoLeader, "Leader when nobody leads")
	if _, leading := e.Term(); leading {
		t.Fatal("Term leading before any Campaign")
	}
	l := mustCampaign(t, b, e, "v1")
	errIs(t, other.Proclaim(ctx, "x"), election.ErrNotLeader, "Proclaim by a non-leader while another leads")
	errIs(t, other.Resign(ctx), election.ErrNotLeader, "Resign by a non-leader while another leads")
	obs := observe(t, b, other)
	obs.until(t, b, l)
	ok(t, e.Proclaim(ctx, "v2"), "Proclaim")
	want := l
	want.Value = "v2"
	obs.until(t, b, want)
	if term, _ := e.Term(); !sameTerm(term, want) {
		t.Fatalf("Term after Proclaim = %+v, want %+v", term, want)
	}
	if ld, err := other.Leader(ctx); err != nil || !sameTerm(ld, want) {
		t.Fatalf("Leader after Proclaim = %+v, %v; want %+v", ld, err, want)
	}
	ok(t, e.Resign(ctx), "Resign")
	obs.until(t, b, noLeader)
	errIs(t, takeErr(other.Leader(ctx)), election.ErrNoLeader, "Leader after Resign")
	if _, leading := e.Term(); leading {
		t.Fatal("Term leading after Resign")
	}
	errIs(t, e.Resign(ctx), election.ErrNotLeader, "second Resign")
}

// electObserve: Observe delivers the current state first (no leader as a
// zero Leadership), then every term and every gap between terms, with
// tokens going up; an Observe opened during a term starts with that term.
func electObserve(t *testing.T, b Backend) {
	watcher := b.NewElection(t, name(t))
	ctx := b.ctx(t)
	obs := observe(t, b, watcher)
	obs.first(t, b, noLeader)
	var tokens []fencing.Token
	for i := range 3 {
		e := b.NewElection(t, name(t))
		l := mustCampaign(t, b, e, fmt.Sprint("leader ", i))
		obs.until(t, b, l)
		observe(t, b, watcher).first(t, b, l)
		tokens = append(tokens, l.Token())
		ok(t, e.Resign(ctx), "Resign")
		obs.until(t, b, noLeader)
	}
	increasing(t, "successive leaders", tokens...)
}

// electObserveNoRepeat: an observer that reads nothing while leaders come
// and go may miss states in between, but never sees one state twice in a
// row (the no-leader state that came back before it read, say), and sees
// the latest.
func electObserveNoRepeat(t *testing.T, b Backend) {
	watcher, e := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	obs := observe(t, b, watcher) // not read until the end
	for i := range 3 {
		mustCampaign(t, b, e, fmt.Sprint("term ", i))
		ok(t, e.Resign(ctx), "Resign")
	}
	last := mustCampaign(t, b, e, "last")
	obs.until(t, b, last)
	ok(t, e.Resign(ctx), "Resign")
}

// electObserveFirst: Observe's first value is the state when it was called,
// for the leader's own Service and for any other: a change that completed
// before Observe was called is never missing from it.
func electObserveFirst(t *testing.T, b Backend) {
	e, before := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	observe(t, b, before).first(t, b, noLeader)
	kinds := []string{"the leader's own Service", "a Service made before the change", "a Service observing before the change", "a Service made after the change"}
	firsts := func(want election.Leadership, idle election.Service) {
		t.Helper()
		for j, s := range []election.Service{e, idle, before, b.NewElection(t, name(t))} {
			if got := observe(t, b, s).next(t, b); !sameTerm(got, want) {
				t.Fatalf("first observation of %s: %+v, want %+v", kinds[j], got, want)
			}
		}
	}
	for i := range 3 {
		idle := b.NewElection(t, name(t))
		l := mustCampaign(t, b, e, fmt.Sprint("term ", i))
		firsts(l, idle)
		idle = b.NewElection(t, name(t))
		ok(t, e.Resign(ctx), "Resign")
		firsts(noLeader, idle)
	}
}

// electSecondCampaign: a second Campaign of the Service that leads waits
// until the first term ends, and then is a new term with a higher token.
func electSecondCampaign(t *testing.T, b Backend) {
	e := b.NewElection(t, name(t))
	ctx := b.ctx(t)
	l1 := mustCampaign(t, b, e, "first")
	cctx, cancel := context.WithTimeout(ctx, brief)
	defer cancel()
	errIs(t, e.Campaign(cctx, "second"), context.DeadlineExceeded, "second Campaign while leading, past its deadline")
	if term, leading := e.Term(); !leading || !sameTerm(term, l1) {
		t.Fatalf("term after a second Campaign gave up = %+v, %v; want %+v", term, leading, l1)
	}
	second := startErr(func() error { return e.Campaign(ctx, "second") })
	notYet(t, second, "second Campaign while the first term lasts")
	ok(t, e.Resign(ctx), "Resign")
	awaitOK(t, b, second, "second Campaign")
	l2, leading := e.Term()
	if !leading || l2.Value != "second" || l2.Created == l1.Created {
		t.Fatalf("term after the second Campaign = %+v, %v", l2, leading)
	}
	increasing(t, "two terms of one candidate", l1.Token(), l2.Token())
	ok(t, e.Resign(ctx), "Resign")
}

// electCancelled: a Campaign whose context ends while it waits returns
// ctx.Err() and leaves no candidacy behind: when the leader resigns, nobody
// leads. The candidate can campaign again.
func electCancelled(t *testing.T, b Backend) {
	leader, c := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	mustCampaign(t, b, leader, "leader")
	cctx, cancel := context.WithTimeout(ctx, brief)
	defer cancel()
	isCtxErr(t, c.Campaign(cctx, "c"), context.DeadlineExceeded, "Campaign past its deadline")
	if _, leading := c.Term(); leading {
		t.Fatal("a withdrawn candidate has a term")
	}
	wantAlive(t, c, "after its Campaign's deadline passed")
	obs := observe(t, b, c)
	ok(t, leader.Resign(ctx), "Resign")
	obs.until(t, b, noLeader)
	errIs(t, takeErr(c.Leader(ctx)), election.ErrNoLeader, "Leader after the leader resigned and the candidate withdrew")
	l := mustCampaign(t, b, c, "again")
	obs.until(t, b, l)
	ok(t, c.Resign(ctx), "Resign")
}

// leaderChanged is the LeaderChanged that reports l.
func leaderChanged(l election.Leadership) primitives.LeaderChanged {
	return primitives.LeaderChanged{Key: l.Key, Value: l.Value, Token: l.Token()}
}

// untilLeaderChanged reads events until LeaderChanged want; a slow reader
// may miss LeaderChanged in between, never the latest.
func untilLeaderChanged(t *testing.T, b Backend, ch <-chan primitives.Event, want primitives.LeaderChanged) {
	t.Helper()
	what := fmt.Sprintf("%#v", want)
	if _, closed := readUntil(t, b, ch, what, func(e primitives.Event) bool { return e == primitives.Event(want) }); closed {
		t.Fatalf("event channel closed before %s", what)
	}
}

// electEvents: a candidate's subscription gets Acquired when it wins and
// Released when it resigns, naming the term, and LeaderChanged for its own
// term, for other leaders' and for no leader.
func electEvents(t *testing.T, b Backend) {
	e, other := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	events, changes := e.Subscribe(ctx), e.Subscribe(ctx)
	l := mustCampaign(t, b, e, "me")
	wantAcquired(t, b, events, term(l))
	untilLeaderChanged(t, b, changes, leaderChanged(l))
	ok(t, e.Resign(ctx), "Resign")
	wantReleased(t, b, events, term(l))
	untilLeaderChanged(t, b, changes, primitives.LeaderChanged{})
	lo := mustCampaign(t, b, other, "other")
	untilLeaderChanged(t, b, changes, leaderChanged(lo))
	ok(t, other.Resign(ctx), "Resign")
	untilLeaderChanged(t, b, changes, primitives.LeaderChanged{})
	wantAlive(t, e, "after a subscription's events")
}

// electSlowSubscriber: a subscriber that does not read never stalls the
// candidate, gets every Acquired and Released in order, and the latest
// LeaderChanged.
func electSlowSubscriber(t *testing.T, b Backend) {
	const terms = 8
	e := b.NewElection(t, name(t))
	ctx := b.ctx(t)
	lazy := e.Subscribe(ctx)
	var ls []election.Leadership
	for i := range terms {
		ls = append(ls, mustCampaign(t, b, e, fmt.Sprint("term ", i)))
		ok(t, e.Resign(ctx), "Resign")
	}
	var last primitives.LeaderChanged
	deadline := time.After(b.patience())
	for want := 0; want < 2*terms || last != (primitives.LeaderChanged{}); {
		select {
		case ev, ok := <-lazy:
			if !ok {
				t.Fatal("event channel closed")
			}
			switch ev := ev.(type) {
			case primitives.LeaderChanged:
				last = ev
			case primitives.Acquired, primitives.Released, primitives.Lost:
				l := ls[want/2]
				var exp primitives.Event = primitives.Acquired{Key: l.Key, Token: l.Token(), Created: l.Created}
				if want%2 == 1 {
					exp = primitives.Released{Key: l.Key, Token: l.Token(), Created: l.Created}
				}
				if ev != exp {
					t.Fatalf("event %#v, want %#v", ev, exp)
				}
				want++
			}
		case <-deadline:
			t.Fatalf("within %v: %d of %d hold events, latest LeaderChanged %#v (want no leader)", b.patience(), want, 2*terms, last)
		}
	}
}

// electLead: Lead runs fn with this candidate's own term while it leads,
// resigns after, and returns fn's error alone; the next candidate then
// leads. A Campaign that fails is returned and fn is not called.
func electLead(t *testing.T, b Backend) {
	e, next := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	var got election.Leadership
	var nextWon <-chan outcome[struct{}]
	err := election.Lead(ctx, e, "lead", func(fctx context.Context, l election.Leadership) error {
		got = l
		if term, leading := e.Term(); !leading || !sameTerm(term, l) {
			t.Errorf("fn got %+v while Term is %+v, %v", l, term, leading)
		}
		if ld, err := next.Leader(fctx); err != nil || !sameTerm(ld, l) {
			t.Errorf("other candidate sees leader %+v, %v while fn has %+v", ld, err, l)
		}
		nextWon = startErr(func() error { return next.Campaign(ctx, "next") })
		return errFn
	})
	if !errors.Is(err, errFn) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Lead = %v, want fn's error alone", err)
	}
	if got.Value != "lead" || got.Created == 0 {
		t.Fatalf("fn got %+v", got)
	}
	if _, leading := e.Term(); leading {
		t.Fatal("still leading after Lead returned")
	}
	awaitOK(t, b, nextWon, "next candidate's Campaign after Lead returned")
	ln, _ := next.Term()
	increasing(t, "Lead's term then the next", got.Token(), ln.Token())

	called := false
	lctx, cancel := context.WithTimeout(ctx, brief)
	defer cancel()
	err = election.Lead(lctx, e, "late", func(context.Context, election.Leadership) error { called = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || called {
		t.Fatalf("Lead while another leads, past its deadline = %v (fn called: %v), want DeadlineExceeded and no fn", err, called)
	}
	ok(t, next.Resign(ctx), "Resign")
}

// electDeleteKey: a term whose key is deleted behind its back is lost: Lead's
// context ends with ErrLost and Lead returns it, but the candidate stays
// usable, and its next term has a higher token; a guard rejects the lost
// term.
func electDeleteKey(t *testing.T, b Backend) {
	e, watcher := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	obs := observe(t, b, watcher)
	obs.first(t, b, noLeader)
	lead := startHeld(t, b, e, func(fn func(context.Context, election.Leadership) error) error {
		return election.Lead(ctx, e, "doomed", fn)
	})
	lost := lead.grant
	obs.until(t, b, lost)
	b.DeleteKey(t, lost.Key)
	lead.wantLost(t, b)
	wantAcquiredLost(t, b, lead.events, term(lost))
	obs.until(t, b, noLeader)
	wantAlive(t, e, "after only its key was deleted")
	if _, leading := e.Term(); leading {
		t.Fatal("Term leading after the term's key was deleted")
	}
	l2 := mustCampaign(t, b, e, "again")
	obs.until(t, b, l2)
	fenced(t, lead.gd, lost.Token(), l2.Token())
	ok(t, e.Resign(ctx), "Resign")
}

// electResignKeyGone: a Resign that finds its term's key already gone either
// succeeds or says ErrNotLeader, and every observer, the candidate's own
// included, goes on to see no leader and then the next leader; an Observe
// asked of the candidate afterwards starts with no leader at once.
func electResignKeyGone(t *testing.T, b Backend) {
	e, watcher, next := b.NewElection(t, name(t)), b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	l := mustCampaign(t, b, e, "gone")
	own, other := observe(t, b, e), observe(t, b, watcher)
	own.first(t, b, l)
	other.until(t, b, l)
	b.DeleteKey(t, l.Key)
	if err := e.Resign(ctx); err != nil && !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("Resign after the term's key was deleted: %v, want nil or ErrNotLeader", err)
	}
	own.until(t, b, noLeader)
	other.until(t, b, noLeader)
	observe(t, b, e).first(t, b, noLeader)
	ln := mustCampaign(t, b, next, "next")
	own.until(t, b, ln)
	other.until(t, b, ln)
	wantAlive(t, e, "after its key was deleted and it resigned")
	ok(t, next.Resign(ctx), "Resign")
}

// electKillSession: when the leader's session dies its term is lost, Lead's
// context ends with ErrLost, the Service is done and every later call fails
// wrapping ErrLost; the next candidate leads with a higher token and a guard
// rejects the former leader.
func electKillSession(t *testing.T, b Backend) {
	e, next := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	lead := startHeld(t, b, e, func(fn func(context.Context, election.Leadership) error) error {
		return election.Lead(ctx, e, "doomed", fn)
	})
	l := lead.grant
	nextWon := startErr(func() error { return next.Campaign(ctx, "next") })
	b.KillSession(t, e)
	wantAcquiredLost(t, b, lead.events, term(l))
	lead.wantLost(t, b)
	wantEnded(t, b, e, primitives.ErrLost)
	drainedClosed(t, b, observe(t, b, e).ch, "Observe of an ended Service")
	if _, leading := e.Term(); leading {
		t.Fatal("Term leading after the session died")
	}
	errIs(t, e.Campaign(ctx, "again"), primitives.ErrLost, "Campaign after loss")
	errIs(t, e.Proclaim(ctx, "zombie"), primitives.ErrLost, "Proclaim after loss")
	errIs(t, e.Resign(ctx), primitives.ErrLost, "Resign after loss")
	errIs(t, takeErr(e.Leader(ctx)), primitives.ErrLost, "Leader after loss")
	awaitOK(t, b, nextWon, "next candidate's Campaign after the leader's session died")
	ln, _ := next.Term()
	fenced(t, lead.gd, l.Token(), ln.Token())
	ok(t, next.Resign(ctx), "Resign")
}

// electClose: Close of the leader resigns at once (Released, then its
// subscriptions close), so the next candidate
// does not wait for a TTL, and Close of a waiting candidate withdraws it;
// a closed Service is done with ErrClosed, its Observe channels close and
// every call fails wrapping ErrClosed.
func electClose(t *testing.T, b Backend) {
	e, next, waiting := b.NewElection(t, name(t)), b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	events := e.Subscribe(ctx)
	l := mustCampaign(t, b, e, "closing")
	obs := observe(t, b, e).ch
	nextWon := startErr(func() error { return next.Campaign(ctx, "next") })
	closeHolder(t, b, e, events, term(l), nextWon)
	ln, _ := next.Term()
	increasing(t, "closed leader then next", l.Token(), ln.Token())
	drainedClosed(t, b, obs, "Observe opened before Close")
	drainedClosed(t, b, observe(t, b, e).ch, "Observe opened after Close")
	errIs(t, e.Campaign(ctx, "again"), primitives.ErrClosed, "Campaign after Close")
	errIs(t, e.Proclaim(ctx, "x"), primitives.ErrClosed, "Proclaim after Close")
	errIs(t, e.Resign(ctx), primitives.ErrClosed, "Resign after Close")
	errIs(t, takeErr(e.Leader(ctx)), primitives.ErrClosed, "Leader after Close")
	errIs(t, e.Close(), primitives.ErrClosed, "second Close")

	withdrawn := startErr(func() error { return waiting.Campaign(ctx, "waiting") })
	ok(t, waiting.Close(), "Close of a waiting candidate")
	if _, err := await(t, b, withdrawn, "Campaign of a closed candidate"); err == nil {
		t.Fatal("a closed candidate's Campaign won")
	}
	ok(t, next.Close(), "Close of the second leader")

	// An Observe made before a fresh Service has looked at the election is
	// answered, and its channel closed, when the Service closes.
	fresh := b.NewElection(t, name(t))
	early := start(func() (<-chan election.Leadership, error) { return fresh.Observe(ctx), nil })
	ok(t, fresh.Close(), "Close of a fresh Service")
	drainedClosed(t, b, awaitOK(t, b, early, "Observe of a Service closed right after it was made"), "Observe of a closed fresh Service")

	watcher := b.NewElection(t, name(t))
	errIs(t, takeErr(watcher.Leader(ctx)), election.ErrNoLeader, "Leader right after the leader closed and the candidate withdrew")
}

// electConcurrentCloses: see concurrentCloses; the next candidate's
// Campaign wins within prompt().
func electConcurrentCloses(t *testing.T, b Backend) {
	ctx := b.ctx(t)
	e := b.NewElection(t, name(t))
	mustCampaign(t, b, e, "closing")
	next := []election.Service{b.NewElection(t, name(t)), b.NewElection(t, name(t))}
	concurrentCloses(t, b, e, func(i int) error {
		cctx, cancel := context.WithTimeout(ctx, b.prompt())
		defer cancel()
		if err := next[i].Campaign(cctx, "next"); err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
		return next[i].Resign(ctx)
	})
}

// electPause: a leader paused past its TTL is replaced by the next candidate
// with a higher token; a guard rejects the paused leader, which sees Lost
// once it resumes and no longer leads.
func electPause(t *testing.T, b Backend) {
	e, next := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	gd := guard.New()
	events := e.Subscribe(ctx)
	l := mustCampaign(t, b, e, "paused")
	ok(t, gd.Check(l.Token()), "guard admits the leader")
	nextWon := startErr(func() error { return next.Campaign(ctx, "next") })
	resume := b.pause(t, e)
	awaitOK(t, b, nextWon, "next candidate's Campaign while the leader is paused")
	ln, _ := next.Term()
	fenced(t, gd, l.Token(), ln.Token())
	resume()
	wantAcquiredLost(t, b, events, term(l))
	wantEnded(t, b, e, primitives.ErrLost)
	if _, leading := e.Term(); leading {
		t.Fatal("paused leader still has its term after it resumed")
	}
	errIs(t, e.Proclaim(ctx, "zombie"), primitives.ErrLost, "Proclaim by the paused leader")
	ok(t, next.Resign(ctx), "Resign")
}

// electResignTerm: where the Service is an election.TermResigner, ResignTerm
// ends exactly the term it names (by Created): an ended term, or the current
// one with a zero Created, gives ErrNotLeader and keeps the current term;
// the current term's Created alone, its other fields zero, ends it.
func electResignTerm(t *testing.T, b Backend) {
	e := b.NewElection(t, name(t))
	tr, isResigner := e.(election.TermResigner)
	if !isResigner {
		// Lead falls back to Resign; the Lead law covers that.
		return
	}
	ctx := b.ctx(t)
	l1 := mustCampaign(t, b, e, "1")
	ok(t, e.Resign(ctx), "Resign")
	l2 := mustCampaign(t, b, e, "2")
	errIs(t, tr.ResignTerm(ctx, l1), election.ErrNotLeader, "ResignTerm of an ended term")
	zero := l2
	zero.Created = 0
	errIs(t, tr.ResignTerm(ctx, zero), election.ErrNotLeader, "ResignTerm of the current term with a zero Created")
	ended := l2
	ended.Created = l1.Created
	errIs(t, tr.ResignTerm(ctx, ended), election.ErrNotLeader, "ResignTerm of the current key and token with an ended term's Created")
	if term, leading := e.Term(); !leading || !sameTerm(term, l2) {
		t.Fatalf("stale ResignTerms ended the current term: %+v, %v", term, leading)
	}
	ok(t, tr.ResignTerm(ctx, election.Leadership{Created: l2.Created}), "ResignTerm of the current term named by its Created alone")
	if _, leading := e.Term(); leading {
		t.Fatal("still leading after ResignTerm")
	}
}

// electGrantTokenNow: a GrantToken following an election stamps exactly
// while the candidate leads as far as its calls tell: from Campaign's
// return until Resign's.
func electGrantTokenNow(t *testing.T, b Backend) {
	e := b.NewElection(t, name(t))
	ctx := b.ctx(t)
	src := primitives.FollowGrants(ctx, name(t), e)
	for i := range 10 {
		l := mustCampaign(t, b, e, "v")
		if tok := src.Token(); tok != l.FencingToken {
			t.Fatalf("term %d: token %d right after Campaign returned the term's %d", i, tok, l.FencingToken)
		}
		ok(t, e.Resign(ctx), "Resign")
		if tok := src.Token(); tok != 0 {
			t.Fatalf("term %d: token %d right after Resign returned", i, tok)
		}
	}
}

// electEndedContext: a call given a context that has already ended does
// nothing and returns the context's error: Proclaim keeps the value, Resign
// and ResignTerm keep the term, for the leader itself and for everyone else.
func electEndedContext(t *testing.T, b Backend) {
	e, other := b.NewElection(t, name(t)), b.NewElection(t, name(t))
	ctx := b.ctx(t)
	l := mustCampaign(t, b, e, "kept")
	ended, cancel := context.WithCancel(ctx)
	cancel()
	errIs(t, e.Proclaim(ended, "changed"), context.Canceled, "Proclaim with an ended context")
	errIs(t, e.Resign(ended), context.Canceled, "Resign with an ended context")
	if tr, isResigner := e.(election.TermResigner); isResigner {
		errIs(t, tr.ResignTerm(ended, l), context.Canceled, "ResignTerm with an ended context")
	}
	if term, leading := e.Term(); !leading || !sameTerm(term, l) {
		t.Fatalf("Term after calls with an ended context = %+v, %v; want %+v", term, leading, l)
	}
	if ld, err := other.Leader(ctx); err != nil || !sameTerm(ld, l) {
		t.Fatalf("Leader after calls with an ended context = %+v, %v; want %+v", ld, err, l)
	}
	ok(t, e.Resign(ctx), "Resign")
}
