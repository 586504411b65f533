package main

import (
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

	if o.Calls != workers*jobs {
		t.Errorf("%d calls served, want %d", o.Calls, workers*jobs)
	}
	if o.MostAtOnce > permits || o.MostAtOnce < 1 {
		t.Errorf("%d calls in flight at once, want 1 to %d", o.MostAtOnce, permits)
	}
	if o.W4.Scope() != o.W1.Scope() || o.W4.Token() <= o.W1.Token() {
		t.Errorf("W4's grant %+v does not take over W1's %+v with a higher token", o.W4, o.W1)
	}
	if !errors.Is(o.ZombieErr, fencing.ErrTokenStale) {
		t.Errorf("zombie call: %v, want an error wrapping ErrTokenStale", o.ZombieErr)
	}
	if o.KeysAtClose != 0 {
		t.Errorf("%d keys left", o.KeysAtClose)
	}
	storytest.Mentions(t, "story", story, "at most", "REJECTED", "ended as promised")
}

// TestRun checks the thin wrapper main uses.
func TestRun(t *testing.T) { storytest.Run(t, run) }
