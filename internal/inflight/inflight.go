// Package inflight counts work under way on other goroutines, so that one
// that must not return before it is done (a primitive's Close) can wait for
// it, bounded by a context.
package inflight

import (
	"context"
	"sync"
)

// Counter counts work under way. Unlike a sync.WaitGroup, Add may come
// while Wait waits (work that starts then is waited for too). Its zero
// value counts none; the methods of a nil *Counter do nothing, and its Wait
// returns true at once.
type Counter struct {
	mu   sync.Mutex
	n    int
	none chan struct{} // if a Wait asked for it: closed when n drops to 0
}

// Add counts one more piece of work under way.
func (c *Counter) Add() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

// Done counts one piece of work done; each Add needs one Done.
func (c *Counter) Done() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 && c.none != nil {
		close(c.none)
		c.none = nil
	}
}

// Wait blocks until no work is under way, and returns true; or until ctx
// ends, and returns false.
func (c *Counter) Wait(ctx context.Context) bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	if c.n == 0 {
		c.mu.Unlock()
		return true
	}
	if c.none == nil {
		c.none = make(chan struct{})
	}
	none := c.none
	c.mu.Unlock()
	select {
	case <-none:
		return true
	case <-ctx.Done():
		return false
	}
}
