package e2e_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives"
)

// nextEvent returns the next event of the holder that is not a
// LeaderChanged, failing t after d.
func nextEvent(t *testing.T, events <-chan primitives.Event, d time.Duration) (primitives.Event, time.Time) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("events closed")
			}
			if _, ok := ev.(primitives.LeaderChanged); ok {
				continue
			}
			return ev, time.Now()
		case <-timeout:
			t.Fatalf("no event within %v", d)
		}
	}
}

// A leader whose every request hangs (its link paused: each waits until
// its context ends) is Suspended, Resumed once the API server answers
// again, and, paused again, Lost at the Suspended event's deadline, not
// when a hung request gives up (opTimeout, 5 s, is longer than the TTL),
// and before a successor takes the Lease, which it does no earlier than
// that deadline.
func TestLostAtDeadlineWhileRequestsHang(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	const ttl = 3 * time.Second
	cs, link := client(t)
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(ttl), k8sio.WithIdentity("deadline-holder"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Heal(); e.Close() })
	events := e.Subscribe(ctx)
	l := mustLead(t, ctx, e, "h")
	if ev, _ := nextEvent(t, events, 10*time.Second); ev != (primitives.Acquired{Key: l.Key, Token: l.Token(), Created: l.Created}) {
		t.Fatalf("first event %#v, want Acquired of %d", ev, l.Token())
	}
	put := func(r *http.Request) bool { return r.Method == http.MethodPut }

	link.Pause()
	eventually(t, 10*time.Second, "a renewal held at the pause", func() bool { return link.Held(put) > 0 })
	ev, _ := nextEvent(t, events, 2*ttl)
	if s, ok := ev.(primitives.Suspended); !ok || s.Token != l.Token() {
		t.Fatalf("event %#v while the renewals hang, want Suspended", ev)
	}
	link.Heal()
	ev, _ = nextEvent(t, events, 2*ttl)
	if r, ok := ev.(primitives.Resumed); !ok || r.Token != l.Token() {
		t.Fatalf("event %#v once the server answers again, want Resumed", ev)
	}

	next := newDisco(t, lease, "deadline-next")
	nextWon := make(chan time.Time, 1)
	go func() {
		if err := next.Campaign(ctx, "n"); err != nil {
			t.Errorf("successor's Campaign: %v", err)
		}
		nextWon <- time.Now()
	}()
	eventually(t, 10*time.Second, "the successor waiting", func() bool { return len(records(t, "deadline-next")) == 1 })
	link.Pause()
	ev, _ = nextEvent(t, events, 2*ttl)
	s, ok := ev.(primitives.Suspended)
	if !ok {
		t.Fatalf("event %#v while the renewals hang again, want Suspended", ev)
	}
	// Suspended, a request is bounded by the deadline alone: the next
	// renewal hangs until then.
	eventually(t, ttl, "a renewal held at the pause after Suspended", func() bool { return link.Held(put) > 0 })
	ev, at := nextEvent(t, events, 2*ttl)
	if lost, ok := ev.(primitives.Lost); !ok || lost.Token != l.Token() {
		t.Fatalf("event %#v after Suspended, want Lost", ev)
	}
	if late := at.Sub(s.Deadline); late > time.Second {
		t.Fatalf("Lost %v after the deadline the Suspended event named, with a request hanging", late)
	}
	if won := <-nextWon; won.Before(s.Deadline) {
		t.Fatalf("the successor led %v before the holder's deadline", s.Deadline.Sub(won))
	}
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
