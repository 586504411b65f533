package memio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// TestLeaderChangedNeverTwiceAroundOtherEvents: a subscriber of a leader
// that reads late never gets one LeaderChanged twice in a row, also when
// an event of its hold (Suspended) came between: the leader proclaimed v2
// and then v1 again while the reader had v1 queued.
func TestLeaderChangedNeverTwiceAroundOtherEvents(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	e := testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(st, "/e"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events := e.Subscribe(ctx)
	if err := e.Campaign(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	memio.SessionOf(e).Suspend()
	for _, v := range []string{"v2", "v1"} {
		if err := e.Proclaim(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	memio.SessionOf(e).Resume()
	var got []primitives.Event
	var last *primitives.LeaderChanged
	for ev := range events {
		got = append(got, ev)
		if _, ok := ev.(primitives.Resumed); ok {
			break
		}
		lc, ok := ev.(primitives.LeaderChanged)
		if !ok {
			continue
		}
		if last != nil && *last == lc {
			t.Fatalf("events %+v: LeaderChanged %+v twice in a row", got, lc)
		}
		last = &lc
	}
	if last == nil || last.Value != "v1" {
		t.Fatalf("events %+v: the last LeaderChanged is not v1's", got)
	}
}
