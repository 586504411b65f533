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
}

// NewFanout returns a Fanout. coalescable, if not nil, marks the events that
// may replace an unread coalescable event queued just before them (states,
// of which a slow reader needs only the latest); all other events are
// delivered one by one. An event that would replace one queued right after
// an event equal to it (==) removes it instead, so that a reader never
// receives one state twice in a row. Coalescable events must be of
// comparable types.
func NewFanout[E any](coalescable func(E) bool) *Fanout[E] {
	return &Fanout[E]{coalescable: coalescable, subs: make(map[*subscriber[E]]struct{})}
}

// Subscribe returns a channel that receives first the given events, then
// every event published after Subscribe returns, in order. The channel is
// closed when ctx ends, or after the last queued event has been received
// once the Fanout is closed. A subscriber that stops reading must cancel ctx
// to free its goroutine.
func (f *Fanout[E]) Subscribe(ctx context.Context, first ...E) <-chan E {
	out := make(chan E)
	s := &subscriber[E]{wake: make(chan struct{}, 1), queue: append([]E(nil), first...)}
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
		// Only an unread tail may be replaced: the head (index 0) may be
		// in the middle of being sent, so it is never touched here.
		if n := len(s.queue); co && n > 1 && f.coalescable(s.queue[n-1]) {
			if prev := s.queue[n-2]; f.coalescable(prev) && any(prev) == any(e) {
				// Back to the state before the tail: the reader is to
				// see it once. The head may be read meanwhile; it is
				// only looked at.
				var zero E
				s.queue[n-1] = zero
				s.queue = s.queue[:n-1]
			} else {
				s.queue[n-1] = e
			}
		} else {
			s.queue = append(s.queue, e)
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	f.mu.Unlock()
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
