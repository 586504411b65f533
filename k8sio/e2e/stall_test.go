package e2e_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/internal/testkit"
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

// stalledPair starts a session of TTL ttl with two elections on it, a and
// b, both leading, and b's events; then stalls every request about a's
// Lease (the link holds them until Heal or their context ends) and returns
// once one is held.
func stalledPair(t *testing.T, id string, ttl time.Duration) (s *k8sio.Session, a, b election.Service, events <-chan primitives.Event, link *faults.Link) {
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
	a = testkit.ClosedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, la, k8sio.WithSession(s)))
	b = testkit.ClosedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lb, k8sio.WithSession(s)))
	mustLead(t, ctx, a, "a")
	mustLead(t, ctx, b, "b")
	events = b.Subscribe(ctx)
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
	testkit.Eventually(t, 10*time.Second, "a request about a's Lease held", func() bool { return link.Held(touchesA) > 0 })
	return s, a, b, events, link
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
	_, _, b, events, link := stalledPair(t, "stall-other", ttl)
	stalled := time.Now()
	ctx := background(t)

	withinPrompt(t, ctx, "b's Proclaim", func(ctx context.Context) error { return b.Proclaim(ctx, "b2") })
	withinPrompt(t, ctx, "b's Resign", b.Resign)
	eventWithin(t, events, "b's Released", func(ev primitives.Event) bool { _, ok := ev.(primitives.Released); return ok })
	withinPrompt(t, ctx, "b's Campaign", func(ctx context.Context) error { return b.Campaign(ctx, "b3") })
	eventWithin(t, events, "b's Acquired", func(ev primitives.Event) bool { _, ok := ev.(primitives.Acquired); return ok })

	// Well past the 5 s bound of a's requests and past b's suspension point.
	testkit.NeverSuspended(t, events, time.Until(stalled.Add(8*time.Second)))
	if l, ok := b.Term(); !ok || l.Value != "b3" {
		t.Fatalf("b's term after a's requests stalled for 8 s: %+v, %v; want leading with b3", l, ok)
	}
	link.Heal()
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
	s, _, b, _, _ := stalledPair(t, "stall-close", ttl)
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
