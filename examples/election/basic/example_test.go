package main

import (
	"errors"
	"testing"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func TestStory(t *testing.T) {
	storytest.NoLeaks(t)
	o, story := storytest.Tell(t, tell)

	// Three terms, A then B then C, with rising tokens.
	if len(o.Leaders) != 3 {
		t.Fatalf("%d terms, want 3: %+v", len(o.Leaders), o.Leaders)
	}
	for i, want := range []string{"A", "B", "C"} {
		if o.Leaders[i].Value != want {
			t.Errorf("term %d led by %q, want %q", i, o.Leaders[i].Value, want)
		}
		if i > 0 && o.Leaders[i].Token() <= o.Leaders[i-1].Token() {
			t.Errorf("token went from %d to %d", o.Leaders[i-1].Token(), o.Leaders[i].Token())
		}
	}
	// The observer saw each of them, in order, and nobody else.
	if len(o.Observed) != len(o.Leaders) {
		t.Fatalf("observer saw %+v, want %+v", o.Observed, o.Leaders)
	}
	for i := range o.Leaders {
		if o.Observed[i].Key != o.Leaders[i].Key || o.Observed[i].Token() != o.Leaders[i].Token() {
			t.Errorf("observer's leader %d = %+v, want %+v", i, o.Observed[i], o.Leaders[i])
		}
	}
	if !o.NoLeaderAtEnd {
		t.Error("observer did not see that nobody leads at the end")
	}
	// Each handover fenced out the former leader.
	if len(o.Rejected) != 2 {
		t.Fatalf("%d handovers checked, want 2", len(o.Rejected))
	}
	for i, err := range o.Rejected {
		if !errors.Is(err, fencing.ErrTokenStale) {
			t.Errorf("handover %d: former leader's write: %v, want ErrTokenStale", i, err)
		}
	}
	if err := o.LeadErrs["A"]; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("A's Lead: %v, want ErrClosed", err)
	}
	if err := o.LeadErrs["B"]; !errors.Is(err, primitives.ErrLost) {
		t.Errorf("B's Lead: %v, want ErrLost", err)
	}
	if err, ok := o.LeadErrs["C"]; !ok || err != nil {
		t.Errorf("C's Lead: %v (returned: %v), want nil", err, ok)
	}
	storytest.Mentions(t, "story", story, "ended as promised")
}

// TestRun checks the thin wrapper main uses.
func TestRun(t *testing.T) { storytest.Run(t, run) }
