package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func TestStory(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var out bytes.Buffer
	o, err := tell(ctx, &out, etcdtest.Endpoints())
	t.Logf("story:\n%s", out.String())
	if err != nil {
		t.Fatalf("story: %v", err)
	}

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
	for _, want := range []string{"ONE shared token", "Lost", "REJECTED", "ended as promised"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("story does not mention %q", want)
		}
	}
}

// TestRun checks the thin wrapper main uses.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, etcdtest.Endpoints()); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
}
