package memio_test

import (
	"testing"
	"time"

	"github.com/ahrtr/disco/memio"
)

// TestFakeClockNeverGoesBack: two Advances at once (one running a timer
// while the other moves on) leave the clock at the later of their ends,
// never back at the earlier: the deadlines memio counts on it would come
// again.
func TestFakeClockNeverGoesBack(t *testing.T) {
	start := time.Unix(1e9, 0)
	clock := memio.NewFakeClock(start)
	entered, release := make(chan struct{}), make(chan struct{})
	clock.AfterFunc(time.Second, func() { close(entered); <-release })
	first := make(chan struct{})
	go func() {
		defer close(first)
		clock.Advance(2 * time.Second) // runs the timer, which waits
	}()
	<-entered
	clock.Advance(time.Minute)
	close(release)
	<-first
	if got, want := clock.Now(), start.Add(time.Second+time.Minute); got.Before(want) {
		t.Fatalf("after Advance(1m) from %v, and Advance(2s) from the start, the clock reads %v: it went back", start.Add(time.Second), got)
	}
}
