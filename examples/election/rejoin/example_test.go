package main

import (
	"context"
	"errors"
	"testing"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/fencing"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func TestStory(t *testing.T) {
	storytest.NoLeaks(t)
	o, story := storytest.Tell(t, tell)

	// Three terms, A then B then C, with rising tokens.
	if len(o.Terms) != 3 {
		t.Fatalf("%d terms, want 3: %+v", len(o.Terms), o.Terms)
	}
	for i, want := range []string{"A", "B", "C"} {
		if o.Terms[i].Node != want || o.Terms[i].L.Value != want {
			t.Errorf("term %d led by %+v, want %s", i, o.Terms[i], want)
		}
		if i > 0 && o.Terms[i].L.Token() <= o.Terms[i-1].L.Token() {
			t.Errorf("token went from %d to %d", o.Terms[i-1].L.Token(), o.Terms[i].L.Token())
		}
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
	// A and B lost their sessions and came back on new services; C never
	// lost its.
	for name, want := range map[string]int{"A": 2, "B": 2, "C": 1} {
		if o.Built[name] != want {
			t.Errorf("%s's supervisor built %d services, want %d", name, o.Built[name], want)
		}
	}
	if !errors.Is(o.Wait, context.Canceled) {
		t.Errorf("the errgroup returned %v, want context.Canceled", o.Wait)
	}
	if o.KeysAtEnd != 0 {
		t.Errorf("%d keys left", o.KeysAtEnd)
	}
	storytest.Mentions(t, "story", story, "came back into the line", "ended as promised")
}

// TestRun checks the thin wrapper main uses.
func TestRun(t *testing.T) { storytest.Run(t, run) }
