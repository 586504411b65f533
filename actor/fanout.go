package actor

import (
	"context"
	"sync"
)

// Fanout delivers published events to every current subscriber, each through
// its own queue and goroutine, so that Publish never blocks however slowly a
// subscriber reads.
type Fanout[E any] struct {
	coalescable func(E) bool

	mu     sync.Mutex
	subs   map[*subscriber[E]]struct{}
	closed bool
	wg     sync.WaitGroup
}

type subscriber[E any] struct {
	mu     sync.Mutex
	queue  []E
	closed bool // no more events will be queued
	wake   chan struct{}
	// last is the latest coalescable event queued for the reader (it may
	// have been received since), before the one queued before last: what
	// a replaceable tail (last) is compared with.
	last, before       E
	hasLast, hasBefore bool
}

// NewFanout returns a Fanout. coalescable, if not nil, marks the events that
// may replace an unread coalescable event queued just before them (states,
// of which a slow reader needs only the latest); all other events are
// delivered one by one. An event that would replace one whose coalescable
// predecessor for the reader (queued or already received, whatever other
// events came between) is equal to it (==) removes it instead, so that a
// reader never receives one state twice in a row among the coalescable
// events. Coalescable events must be of comparable types.
func NewFanout[E any](coalescable func(E) bool) *Fanout[E] {
	return &Fanout[E]{coalescable: coalescable, subs: make(map[*subscriber[E]]struct{})}
}

// Subscribe returns a channel that receives first the given events, then
// every event published after Subscribe returns, in order (the given
// events are queued as published ones are, coalescable ones coalesced
// alike). The channel is
// closed when ctx ends, or after the last queued event has been received
// once the Fanout is closed; for a nil ctx it is returned closed, and
// receives nothing. A subscriber that stops reading must cancel ctx to free
// its goroutine.
func (f *Fanout[E]) Subscribe(ctx context.Context, first ...E) <-chan E {
	out := make(chan E)
	if ctx == nil {
		close(out)
		return out
	}
	s := &subscriber[E]{wake: make(chan struct{}, 1)}
	for _, e := range first {
		f.queue(s, e, f.coalescable != nil && f.coalescable(e))
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		close(out)
		return out
	}
	f.subs[s] = struct{}{}
	f.wg.Add(1)
	f.mu.Unlock()
	go f.pump(ctx, s, out)
	return out
}

func (f *Fanout[E]) pump(ctx context.Context, s *subscriber[E], out chan<- E) {
	defer f.wg.Done()
	defer close(out)
	defer func() {
		f.mu.Lock()
		delete(f.subs, s)
		f.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return
			}
			select {
			case <-s.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		e := s.queue[0]
		s.mu.Unlock()
		select {
		case out <- e:
			// Publish never touches the head, so it is still e.
			s.mu.Lock()
			var zero E
			s.queue[0] = zero
			s.queue = s.queue[1:]
			s.mu.Unlock()
		case <-ctx.Done():
			return
		}
	}
}

// Publish queues e for every subscriber and never blocks.
func (f *Fanout[E]) Publish(e E) {
	co := f.coalescable != nil && f.coalescable(e)
	f.mu.Lock()
	for s := range f.subs {
		s.mu.Lock()
		f.queue(s, e, co)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	f.mu.Unlock()
}

// queue queues e for s; co says whether e is coalescable. s.mu held (or s
// not yet shared).
func (f *Fanout[E]) queue(s *subscriber[E], e E, co bool) {
	// Only an unread tail may be replaced: the head (index 0) may be in
	// the middle of being sent, so it is never touched here.
	if n := len(s.queue); co && n > 1 && f.coalescable(s.queue[n-1]) {
		// The tail is s.last, and s.before the state the reader has
		// (or will have) before it.
		if s.hasBefore && any(s.before) == any(e) {
			// Back to the state before the tail: the reader is to see
			// it once.
			var zero E
			s.queue[n-1] = zero
			s.queue = s.queue[:n-1]
			s.last, s.hasBefore = s.before, false
			return
		}
		s.queue[n-1], s.last = e, e
		return
	}
	s.queue = append(s.queue, e)
	if co {
		s.before, s.hasBefore = s.last, s.hasLast
		s.last, s.hasLast = e, true
	}
}

// Close ends every subscription: each subscriber still receives what was
// queued for it, then its channel closes. Later Subscribes get a closed
// channel; later Publishes are dropped.
func (f *Fanout[E]) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	for s := range f.subs {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	f.subs = nil
	f.mu.Unlock()
}

// wait blocks until every subscriber goroutine has exited (after Close);
// subscribers that neither read nor cancel their context keep it waiting.
func (f *Fanout[E]) wait() { f.wg.Wait() }
