// Package hold is the engine behind lock.Do, rwlock.DoRead, rwlock.DoWrite
// and election.Lead: acquire, run fn while the hold lasts, release.
package hold

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/nilness"
	"github.com/ahrtr/disco/primitives"
)

// Owner is what every primitive's Service offers: its events and its end.
type Owner interface {
	Subscribe(ctx context.Context) <-chan primitives.Event
	Done() <-chan struct{}
	Err() error
}

// Spec says how to acquire, name and release one kind of grant G.
type Spec[G any] struct {
	Acquire func(context.Context) (G, error)
	// Created names the grant, as the events' Created does.
	Created func(G) int64
	// Key is the grant's key, for a SuspendedError.
	Key     func(G) string
	Release func(context.Context, G) error
	// NotHeld is the primitive's sentinel for a release that finds the grant
	// gone.
	NotHeld error
	// ReleaseTimeout bounds the release after fn, which runs even when the
	// caller's context has ended.
	ReleaseTimeout time.Duration
}

// Check returns an error wrapping primitives.ErrInvalidArgument if the
// context given to helper (e.g. "lock.Do") is nil, the service is (a typed
// nil too: see nilness.Is), or fn is.
func Check(ctx context.Context, helper string, service any, fnNil bool) error {
	if ctx == nil {
		return fmt.Errorf("%s: nil context: %w", helper, primitives.ErrInvalidArgument)
	}
	if nilness.Is(service) {
		return fmt.Errorf("%s: nil Service: %w", helper, primitives.ErrInvalidArgument)
	}
	return CheckFn(ctx, helper, fnNil)
}

// CheckFn returns an error wrapping primitives.ErrInvalidArgument if the
// context or the fn given to helper is nil.
func CheckFn(ctx context.Context, helper string, fnNil bool) error {
	if ctx == nil {
		return fmt.Errorf("%s: nil context: %w", helper, primitives.ErrInvalidArgument)
	}
	if fnNil {
		return fmt.Errorf("%s: nil fn: %w", helper, primitives.ErrInvalidArgument)
	}
	return nil
}

// suspendReporter is an Owner that can tell, without waiting, whether its
// session is suspended now (driver.Shell.SuspendedUntil).
type suspendReporter interface {
	SuspendedUntil() (deadline time.Time, ok bool)
}

// Run subscribes to s, acquires a grant, and runs fn with a context that is
// cancelled, with the loss as its cause, as soon as s reports Lost for that
// grant (matched by Created) or s is done; with a cause wrapping
// primitives.ErrReleased as soon as s reports Released for it (another call
// of the owner released it); and, if s is a primitives.SuspendCanceler that
// asks for it, as soon as s reports Suspended for it (or at once, if the
// session is suspended when the grant comes), with a cause wrapping
// primitives.ErrSuspended. After fn returns, or panics, the grant is
// released unless it was already lost or released. The result is fn's error
// (first) joined with the loss (or suspension) or the release's error; a
// release that finds the grant gone counts as a loss. A failed acquire is
// returned as is and fn is not called; so is ctx's error when the grant was
// won as ctx ended, after the grant's release.
func Run[G any](ctx context.Context, s Owner, spec Spec[G], fn func(context.Context, G) error) error {
	// Subscribe first, so that no Lost for the grant can be missed.
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	events := primitives.SubscribeHolds(subCtx, s) // Run waits for its grant's end alone
	g, err := spec.Acquire(ctx)
	if err != nil {
		return err
	}
	if ctxtime.Ended(ctx) != nil {
		// Won as ctx ended: nobody is left to work under it.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), spec.ReleaseTimeout)
		defer rcancel()
		if err := spec.Release(rctx, g); err != nil && !errors.Is(err, spec.NotHeld) {
			return errors.Join(ctx.Err(), fmt.Errorf("release: %w", err))
		}
		return ctx.Err()
	}
	created := spec.Created(g)
	sc, ok := s.(primitives.SuspendCanceler)
	onSuspend := ok && sc.CancelOnSuspend()

	fnCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var lost, suspended, released error
	if sr, ok := s.(suspendReporter); ok && onSuspend {
		if deadline, ok := sr.SuspendedUntil(); ok {
			// Granted on a suspended session: its Suspended event may
			// not have reached the subscription yet.
			var key string
			if spec.Key != nil {
				key = spec.Key(g)
			}
			suspended = &primitives.SuspendedError{Key: key, Deadline: deadline}
			cancel(suspended)
		}
	}
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
				switch e := e.(type) {
				case primitives.Lost:
					if created != 0 && e.Created == created {
						lost = e.Err
						cancel(lost)
						return
					}
				case primitives.Released:
					if created != 0 && e.Created == created {
						if err := s.Err(); err != nil {
							// The service's end released it (Close): Err
							// is set before the event is sent.
							lost = err
							cancel(lost)
							return
						}
						released = fmt.Errorf("grant %d released while fn ran: %w", created, primitives.ErrReleased)
						cancel(released)
						return
					}
				case primitives.Suspended:
					if onSuspend && created != 0 && e.Created == created && suspended == nil {
						suspended = &primitives.SuspendedError{Key: e.Key, Deadline: e.Deadline}
						cancel(suspended)
					}
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
	returned := false
	defer func() {
		if !returned {
			// fn panicked: end the watch and release the grant on the
			// panic's way out.
			close(stop)
			<-watched
			if lost == nil && released == nil {
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), spec.ReleaseTimeout)
				defer rcancel()
				_ = spec.Release(rctx, g)
			}
		}
	}()
	fnErr := fn(fnCtx, g)
	returned = true
	close(stop)
	<-watched
	switch {
	case lost != nil:
		return errors.Join(fnErr, suspended, lost)
	case released != nil:
		return errors.Join(fnErr, suspended)
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), spec.ReleaseTimeout)
	defer rcancel()
	if err := spec.Release(rctx, g); errors.Is(err, spec.NotHeld) {
		// The grant ended between fn's return and the release.
		return errors.Join(fnErr, suspended, fmt.Errorf("grant %d ended before its release: %w", created, primitives.ErrLost))
	} else if err != nil {
		return errors.Join(fnErr, suspended, fmt.Errorf("release: %w", err))
	}
	return errors.Join(fnErr, suspended)
}
