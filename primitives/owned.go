package primitives

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/fencing"
)

// Owner is what every primitive's Service offers for Hold: its events and its
// end.
type Owner interface {
	Subscribe(ctx context.Context) <-chan Event
	Done() <-chan struct{}
	Err() error
}

// Hold is the engine behind lock.Do, rwlock.DoRead, rwlock.DoWrite and
// election.Lead; backends and users rarely need it directly.
//
// It subscribes to s, acquires a hold with acquire, and runs fn with a
// context that is cancelled, with the loss as its cause, as soon as s reports
// Lost for that hold (named by id) or s is done. After fn returns, the hold
// is released with release, under a context that outlives ctx by at most
// releaseTimeout, unless it was already lost. The result is fn's error joined
// with the loss or the release's error; a release that finds the hold gone
// (notHeld) counts as a loss. A failed acquire is returned as is and fn is
// not called.
func Hold[G any](ctx context.Context, s Owner,
	acquire func(context.Context) (G, error), id func(G) (string, fencing.Token),
	fn func(context.Context, G) error, release func(context.Context, G) error,
	notHeld error, releaseTimeout time.Duration) error {

	// Subscribe first, so that no Lost for the hold can be missed.
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	events := s.Subscribe(subCtx)
	g, err := acquire(ctx)
	if err != nil {
		return err
	}
	key, token := id(g)

	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lost error
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case e, ok := <-events:
				if !ok {
					events = nil // s is done; Done says why
					continue
				}
				if l, isLost := e.(Lost); isLost && l.Key == key && l.Token == token {
					lost = l.Err
					cancel(lost)
					return
				}
			case <-s.Done():
				lost = s.Err()
				cancel(lost)
				return
			case <-stop:
				return
			}
		}
	}()
	fnErr := fn(fnCtx, g)
	close(stop)
	<-watched
	if lost != nil {
		return errors.Join(fnErr, lost)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer rcancel()
	if err := release(rctx, g); errors.Is(err, notHeld) {
		// The hold ended between fn's return and the release.
		return errors.Join(fnErr, fmt.Errorf("hold %s ended before its release: %w", key, ErrLost))
	} else if err != nil {
		return errors.Join(fnErr, fmt.Errorf("release: %w", err))
	}
	return fnErr
}
