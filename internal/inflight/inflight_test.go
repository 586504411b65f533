package inflight_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/inflight"
)

// Wait returns once every Add has its Done, also for work added while it
// waits, and returns false when its context ends first.
func TestWait(t *testing.T) {
	var c inflight.Counter
	if !c.Wait(context.Background()) {
		t.Fatal("Wait with none under way: false")
	}
	c.Add()
	waited := make(chan bool, 1)
	go func() { waited <- c.Wait(context.Background()) }()
	c.Add() // more work while Wait waits
	c.Done()
	select {
	case <-waited:
		t.Fatal("Wait returned with work under way")
	case <-time.After(50 * time.Millisecond): // a negative check
	}
	c.Done()
	if !<-waited {
		t.Fatal("Wait: false once the work was done")
	}
	c.Add()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if c.Wait(ctx) {
		t.Fatal("Wait with work under way and an ended context: true")
	}
	c.Done()
	var nilCounter *inflight.Counter
	nilCounter.Add()
	nilCounter.Done()
	if !nilCounter.Wait(ctx) {
		t.Fatal("Wait of a nil Counter: false")
	}
}
