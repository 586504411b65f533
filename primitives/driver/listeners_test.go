package driver_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// A driver follows who leads only while someone listens: Listening turns
// true with the first subscription, stays true while any lives, and turns
// false once the last one's context ends, with changed called at each
// turn and not in between.
func TestListenersFollowSubscriptions(t *testing.T) {
	var turns atomic.Int32
	l := driver.NewListeners(func() { turns.Add(1) })
	sh := driver.NewShell(driver.Spec{Kind: "election", Name: "test", Listeners: l})
	if l.Listening() {
		t.Fatal("listening before any subscription")
	}
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	sh.Subscribe(ctx1)
	l.Join(ctx2) // an observation
	if !l.Listening() || turns.Load() != 1 {
		t.Fatalf("after two listeners joined: listening %v, %d turns (want true, 1)", l.Listening(), turns.Load())
	}
	cancel1()
	cancel2()
	testkit.Eventually(t, 5*time.Second, "no listener and two turns after both ended", func() bool {
		return !l.Listening() && turns.Load() == 2
	})
}

// lock.Do and election.Lead watch their own grant's end only: a
// subscription for that (SubscribeHolds) gets the grant's events and does
// not count as a listener.
func TestSubscribeHoldsDoesNotListen(t *testing.T) {
	l := driver.NewListeners(func() {})
	sh := driver.NewShell(driver.Spec{Kind: "election", Name: "test", Listeners: l})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := sh.SubscribeHolds(ctx)
	if l.Listening() {
		t.Fatal("SubscribeHolds counted as a listener")
	}
	if !sh.Grant(driver.Hold{Key: "k", Created: 1, Token: 1}, time.Now(), func(driver.Hold) bool { return true }) {
		t.Fatal("grant refused")
	}
	select {
	case e := <-events:
		if _, ok := e.(primitives.Acquired); !ok {
			t.Fatalf("first event %#v, want Acquired", e)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Acquired on SubscribeHolds")
	}
}

// A GrantToken needs only its grants' events: following an election does
// not make it follow who leads.
func TestFollowGrantsDoesNotListen(t *testing.T) {
	l := driver.NewListeners(func() {})
	sh := driver.NewShell(driver.Spec{Kind: "election", Name: "test", Listeners: l})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := primitives.FollowGrants(ctx, "test", sh)
	if l.Listening() {
		t.Fatal("FollowGrants counted as a listener")
	}
	if !sh.Grant(driver.Hold{Key: "k", Created: 1, Token: 7}, time.Now(), func(driver.Hold) bool { return true }) {
		t.Fatal("grant refused")
	}
	if tok := src.Token(); tok != 7 {
		t.Fatalf("token %d once the grant is recorded, want 7", tok)
	}
}
