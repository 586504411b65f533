package actor

import (
	"context"
	"errors"
	"sync/atomic"
)

// ErrStopped is returned by Call when the loop stopped before answering.
var ErrStopped = errors.New("actor: loop stopped")

const (
	pending int32 = iota
	answered
	abandoned
)

type result[T any] struct {
	v   T
	err error
}

type call[T any] struct {
	ctx   context.Context
	state atomic.Int32
	ch    chan result[T]
}

// Reply is the loop's half of one call. It is answered at most once, and
// answering never blocks.
type Reply[T any] struct{ c *call[T] }

// Context returns the caller's context. The loop may watch it to notice a
// caller that gave up early, but Answer's result is what decides.
func (r Reply[T]) Context() context.Context { return r.c.ctx }

// Answer delivers v and err to the caller. It reports whether the caller will
// see them: false means the caller had already given up (or the call was
// answered before), and the loop must undo whatever v stands for.
func (r Reply[T]) Answer(v T, err error) bool {
	if !r.c.state.CompareAndSwap(pending, answered) {
		return false
	}
	r.c.ch <- result[T]{v, err}
	return true
}

// abandoned reports whether the caller gave up waiting.
func (r Reply[T]) abandoned() bool { return r.c.state.Load() == abandoned }

// Call sends a request to a loop and waits for its answer. post must hand the
// Reply to the loop (typically by posting a message that carries it) and
// report false if the loop no longer accepts messages. Call returns the
// loop's answer; ctx.Err() if ctx ended first; ErrStopped if stopped was
// closed first or post failed. An answer that races with ctx or stopped wins
// only if the loop gave it first: the loop either sees its answer refused or
// knows the caller has it.
func Call[T any](ctx context.Context, stopped <-chan struct{}, post func(Reply[T]) bool) (T, error) {
	c := &call[T]{ctx: ctx, ch: make(chan result[T], 1)}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if !post(Reply[T]{c}) {
		return zero, ErrStopped
	}
	giveUp := func(err error) (T, error) {
		if c.state.CompareAndSwap(pending, abandoned) {
			return zero, err
		}
		r := <-c.ch // answered: the value is already in the channel
		return r.v, r.err
	}
	select {
	case r := <-c.ch:
		return r.v, r.err
	case <-ctx.Done():
		return giveUp(ctx.Err())
	case <-stopped:
		return giveUp(ErrStopped)
	}
}
