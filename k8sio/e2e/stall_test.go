package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/k8sio/e2e/faults"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// touches matches the requests about the Lease lease: its reads, writes
// and deletes, and the lists and watches of it alone.
func touches(lease string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return strings.HasSuffix(r.URL.Path, "/leases/"+lease) ||
			r.URL.Query().Get("fieldSelector") == "metadata.name="+lease
	}
}

// prompt is how long a call on a healthy election may take while another
// election of its session stalls: far below the 5 s a request is bounded
// by, with a margin for a loaded machine.
const prompt = 2 * time.Second

// withinPrompt runs f with a context that ends after prompt, failing t if f
// fails or takes longer.
func withinPrompt(t *testing.T, ctx context.Context, what string, f func(context.Context) error) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, prompt)
	defer cancel()
	began := time.Now()
	if err := f(cctx); err != nil {
		t.Fatalf("%s while another election's requests stall: %v after %v", what, err, time.Since(began))
	}
	if took := time.Since(began); took > prompt {
		t.Fatalf("%s took %v while another election's requests stall; want within %v", what, took, prompt)
	}
}

// eventWithin returns the first event of events that want accepts, failing
// t if another holder event (not a LeaderChanged) comes first or none
// comes within prompt.
func eventWithin(t *testing.T, events <-chan primitives.Event, what string, want func(primitives.Event) bool) {
	t.Helper()
	timeout := time.After(prompt)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("%s: events closed", what)
			}
			if want(ev) {
				return
			}
			if _, ok := ev.(primitives.LeaderChanged); !ok {
				t.Fatalf("%s: event %#v first", what, ev)
			}
		case <-timeout:
			t.Fatalf("%s: not delivered within %v while another election's requests stall", what, prompt)
		}
	}
}

// stalled is a session with two elections on it, a and b, whose every
// request about a's Lease stalls: the link holds it until Heal or its
// context ends.
type stalled struct {
	s                *k8sio.Session
	a, b             election.Service
	aEvents, bEvents <-chan primitives.Event
	link             *faults.Link
}

// stalledPair starts a session of TTL ttl with two elections on it, a,
// leading, and b, leading if bLeads, and their events; then stalls every
// request about a's Lease and returns once one is held.
func stalledPair(t *testing.T, id string, ttl time.Duration, bLeads bool) stalled {
	t.Helper()
	ctx := background(t)
	la, lb := leaseName(t.Name()+"-a"), leaseName(t.Name()+"-b")
	cs, link := client(t)
	t.Cleanup(link.Heal)
	s, err := k8sio.NewSession(cs, k8sio.WithIdentity(id), k8sio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	a := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, la, k8sio.WithSession(s)))
	b := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lb, k8sio.WithSession(s)))
	mustLead(t, ctx, a, "a")
	if bLeads {
		mustLead(t, ctx, b, "b")
	}
	st := stalled{s: s, a: a, b: b, aEvents: a.Subscribe(ctx), bEvents: b.Subscribe(ctx), link: link}
	touchesA := touches(la)
	link.PauseMatching(touchesA)
	// A Proclaim on a makes a request about its Lease now; its renewals
	// follow.
	proclaimed := make(chan struct{})
	go func() {
		defer close(proclaimed)
		_ = a.Proclaim(ctx, "a2")
	}()
	t.Cleanup(func() { <-proclaimed })
	eventually(t, 10*time.Second, "a request about a's Lease held", func() bool { return link.Held(touchesA) > 0 })
	return st
}

// One election's request that the API server does not answer holds up no
// other election of the session: while every request about a's Lease
// stalls, well past the 5 s a request is bounded by, b's leader renews and
// is never Suspended, b's Proclaim, Resign and Campaign answer promptly,
// and b's events are delivered. Before, the session's loop made every
// request itself, one at a time: a's held request held the loop, b's
// calls waited behind it, and b was Suspended because the round of
// renewals that a's renewal was part of did not count.
func TestStalledElectionHoldsUpNoOther(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	const ttl = 10 * time.Second // Suspended after 5 s without a renewal
	st := stalledPair(t, "stall-other", ttl, true)
	b, events := st.b, st.bEvents
	stalled := time.Now()
	ctx := background(t)

	withinPrompt(t, ctx, "b's Proclaim", func(ctx context.Context) error { return b.Proclaim(ctx, "b2") })
	withinPrompt(t, ctx, "b's Resign", b.Resign)
	eventWithin(t, events, "b's Released", func(ev primitives.Event) bool { _, ok := ev.(primitives.Released); return ok })
	withinPrompt(t, ctx, "b's Campaign", func(ctx context.Context) error { return b.Campaign(ctx, "b3") })
	eventWithin(t, events, "b's Acquired", func(ev primitives.Event) bool { _, ok := ev.(primitives.Acquired); return ok })

	// Well past the 5 s bound of a's requests and past b's suspension point.
	neverSuspended(t, events, time.Until(stalled.Add(8*time.Second)))
	if l, ok := b.Term(); !ok || l.Value != "b3" {
		t.Fatalf("b's term after a's requests stalled for 8 s: %+v, %v; want leading with b3", l, ok)
	}
	st.link.Heal()
	withinPrompt(t, ctx, "b's Resign once a's requests go through", b.Resign)
}

// A session's Close while every request about a's Lease stalls returns
// within its bound of 5 s (and a margin for a loaded machine), counted
// from its call, though a request of a was under way: b resigns, and b's
// Lease is free once Close has returned. Before, Close began only once
// the loop had finished a's request, up to 5 s later, and then had 5 s of
// its own: it took about 10 s.
func TestSessionCloseBoundWhileAnElectionStalls(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	const ttl = 10 * time.Second // not lost while Close runs
	st := stalledPair(t, "stall-close", ttl, true)
	s, b := st.s, st.b
	lb, _ := b.Term()
	began := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	const bound = 7 * time.Second // 5 s, and a margin
	if took := time.Since(began); took > bound {
		t.Fatalf("Session.Close took %v while a's requests stalled; want within %v", took, bound)
	}
	l, err := admin().CoordinationV1().Leases(namespace).Get(background(t), strings.TrimPrefix(lb.Key, namespace+"/"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("b's Lease names %q as holder once the session's Close has returned", *h)
	}
}

// A Lease whose every request stalls past its deadline loses its term
// alone: a's holder is Suspended, then Lost, and the election stays
// usable; the session, whose only Lease a's is, lives on while the API
// server answers it otherwise, so b, on the same session, campaigns and
// leads without being Suspended; once a's requests go through again, a
// leads again with a higher token. Before, the session was confirmed only
// by the renewals of the Leases it held: it was lost at a's deadline, and
// b with it.
func TestStalledLeaseLosesItsTermAlone(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	const ttl = 3 * time.Second
	st := stalledPair(t, "stall-alone", ttl, false)
	ctx := background(t)
	la, _ := st.a.Term()
	var suspended primitives.Suspended
	for suspended.Token == 0 {
		ev, _ := nextEvent(t, st.aEvents, 2*ttl)
		switch ev := ev.(type) {
		case primitives.Suspended:
			suspended = ev
		case primitives.Acquired: // a's own, subscribed after it led
		default:
			t.Fatalf("a's event %#v while its requests stall, want Suspended", ev)
		}
	}
	ev, _ := nextEvent(t, st.aEvents, 2*ttl)
	if lost, ok := ev.(primitives.Lost); !ok || lost.Token != la.Token() {
		t.Fatalf("a's event %#v after Suspended, want Lost of its term", ev)
	}
	if err := st.a.Err(); err != nil {
		t.Fatalf("a's election done after its term was Lost at its deadline: %v", err)
	}
	withinPrompt(t, ctx, "b's Campaign once a's term is Lost", func(ctx context.Context) error { return st.b.Campaign(ctx, "b") })
	neverSuspended(t, st.bEvents, 2*ttl)
	if err := st.s.Err(); err != nil {
		t.Fatalf("the session ended, its only Lease's requests stalled, the API server answering it otherwise: %v", err)
	}
	st.link.Heal()
	if err := st.a.Campaign(ctx, "a3"); err != nil {
		t.Fatal(err)
	}
	if l, _ := st.a.Term(); l.Token() <= la.Token() {
		t.Fatalf("a's new token %d, not above its lost term's %d", l.Token(), la.Token())
	}
}

// A supervisor whose term is Lost at its Lease's deadline, every request
// about the Lease stalled, campaigns again on the same election (the
// election stays usable) and leads again once the requests go through:
// the term's suspension ends with the term. Before, the election still
// reported the lost term's suspension, and election.Supervise, which
// campaigns again only once a suspension is over, waited for good.
func TestSupervisorLeadsAgainAfterItsLeaseStalled(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	const ttl = 3 * time.Second
	lease := leaseName(t.Name())
	cs, link := client(t)
	t.Cleanup(link.Heal)
	s, err := k8sio.NewSession(cs, k8sio.WithIdentity("stall-supervise"), k8sio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx, stop := context.WithCancel(background(t))
	terms := make(chan election.Leadership, 4)
	ended := make(chan struct{}, 4)
	supervised := make(chan error, 1)
	go func() {
		supervised <- election.Supervise(ctx, func(context.Context) (election.Service, error) {
			return k8sio.NewElection(cs, namespace, lease, k8sio.WithSession(s))
		}, "v", func(ctx context.Context, l election.Leadership) error {
			terms <- l
			<-ctx.Done()
			ended <- struct{}{}
			return nil
		}, election.WithBackoff(50*time.Millisecond, 200*time.Millisecond))
	}()
	t.Cleanup(func() {
		stop()
		if err := <-supervised; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Supervise: %v", err)
		}
	})
	var first election.Leadership
	select {
	case first = <-terms:
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not lead within 20s")
	}
	link.PauseMatching(touches(lease))
	select {
	case <-ended:
	case <-time.After(4 * ttl):
		t.Fatalf("the term's fn still runs %v after every request about its Lease stalled", 4*ttl)
	}
	link.Heal()
	select {
	case second := <-terms:
		if second.Token() <= first.Token() {
			t.Fatalf("the supervisor's second term has token %d, not above the lost term's %d", second.Token(), first.Token())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the supervisor did not lead again within 20s of the Lease's requests going through")
	}
}
