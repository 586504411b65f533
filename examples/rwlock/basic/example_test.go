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

	if len(o.ReaderTokens) != 3 || o.ReaderTokens[0] != o.ReaderTokens[1] || o.ReaderTokens[1] != o.ReaderTokens[2] {
		t.Errorf("concurrent readers' tokens %v, want one shared token", o.ReaderTokens)
	}
	if o.W1Token <= o.ReaderTokens[0] || o.W2Token <= o.W1Token {
		t.Errorf("tokens do not increase: readers %d, W1 %d, W2 %d", o.ReaderTokens[0], o.W1Token, o.W2Token)
	}
	if !errors.Is(o.ZombieErr, fencing.ErrTokenStale) {
		t.Errorf("zombie write: %v, want an error wrapping ErrTokenStale", o.ZombieErr)
	}
	if len(o.FinalTokens) != 3 || o.FinalTokens[0] != o.FinalTokens[1] || o.FinalTokens[1] != o.FinalTokens[2] || o.FinalTokens[0] <= o.W2Token {
		t.Errorf("final readers' tokens %v, want one shared token above W2's %d", o.FinalTokens, o.W2Token)
	}
	if o.FinalValue != "v3 by W2" {
		t.Errorf("final readers read %q, want W2's value", o.FinalValue)
	}
	storytest.Mentions(t, "story", story, "ONE shared token", "Lost", "REJECTED", "ended as promised")
}

// TestRun checks the thin wrapper main uses.
func TestRun(t *testing.T) { storytest.Run(t, run) }
