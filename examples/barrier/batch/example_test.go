package main

import (
	"testing"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/examples/internal/storytest"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func TestStory(t *testing.T) {
	storytest.NoLeaks(t)
	o, story := storytest.Tell(t, tell)

	for i := range workers {
		if o.Started[i].Before(o.InputReady) {
			t.Errorf("worker %d passed the gate before it was released", i+1)
		}
		for j := range workers {
			if o.Entered[i].Before(o.Entering[j]) {
				t.Errorf("worker %d started before worker %d entered", i+1, j+1)
			}
			if o.Left[i].Before(o.Finished[j]) {
				t.Errorf("worker %d left before worker %d finished", i+1, j+1)
			}
		}
	}
	if o.KeysLeft != 0 {
		t.Errorf("%d keys left", o.KeysLeft)
	}
	storytest.Mentions(t, "story", story, "nobody started early", "nobody moved on early", "ended as promised")
}

// TestRun checks the thin wrapper main uses.
func TestRun(t *testing.T) { storytest.Run(t, run) }
