package primitives

import (
	"context"
	"errors"
	"time"

	"github.com/ahrtr/disco/fencing"
)

// RunOwned is the engine behind lock.Do, rwlock.DoRead, rwlock.DoWrite and
// election.Lead; backends and users rarely need it directly.
//
// It runs fn while the hold named key and token lasts. fn's context is
// cancelled, with the loss as its cause, as soon as events carries Lost for
// that hold or done is
// closed (then errOf says why). After fn returns, release is called with a
// context that outlives ctx by at most releaseTimeout, unless the hold was
// already lost. The result is fn's error joined with the loss or the
// release's error.
//
// events must have been subscribed before the hold was acquired, so that no
// Lost for key can be missed.
func RunOwned(ctx context.Context, events <-chan Event, done <-chan struct{}, errOf func() error,
	key string, token fencing.Token, fn func(ctx context.Context) error, release func(ctx context.Context) error,
	releaseTimeout time.Duration) error {

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
					events = nil // the service is done; done says why
					continue
				}
				if l, isLost := e.(Lost); isLost && l.Key == key && l.Token == token {
					lost = l.Err
					cancel(lost)
					return
				}
			case <-done:
				lost = errOf()
				cancel(lost)
				return
			case <-stop:
				return
			}
		}
	}()
	fnErr := fn(fnCtx)
	close(stop)
	<-watched
	if lost != nil {
		return errors.Join(fnErr, lost)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer rcancel()
	return errors.Join(fnErr, release(rctx))
}
