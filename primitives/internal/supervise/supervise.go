// Package supervise is the engine behind election.Supervise and
// lock.Supervise: keep one owner in the game until its context ends, building
// a new service after a lost session and trying again after a lost hold,
// with bounded exponential backoff between attempts.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/nilness"
	"github.com/ahrtr/disco/primitives"
)

// Service is what every primitive's Service offers the supervisor: its
// events, its end, and Close.
type Service interface {
	Subscribe(ctx context.Context) <-chan primitives.Event
	Done() <-chan struct{}
	Err() error
	Close() error
}

// Result is the outcome of one term: whether fn ran and since when, what fn
// returned, whether Run's ctx had ended by the time fn returned, and what
// the helper running the term (lock.Do, election.Lead) returned.
type Result struct {
	Ran      bool
	Began    time.Time
	FnErr    error
	CtxEnded bool
	Err      error
}

// holdPart is what the helper running the term added to fn's error (a
// loss, a suspension, a failed release): Err without FnErr, which the
// helpers join first (see hold.Run). fn's own error never makes a term
// lost: an fn may return an inner lock's ErrLost with its hold intact.
func (r Result) holdPart() error {
	if r.FnErr == nil {
		return r.Err
	}
	j, ok := r.Err.(interface{ Unwrap() []error })
	if !ok {
		return nil // fn's error alone
	}
	return errors.Join(j.Unwrap()[1:]...)
}

// lostTerm reports whether err says that a hold ended without its owner's
// asking (lost or, for a service built to cancel there, suspended), so that
// the supervisor tries again rather than returning.
func lostTerm(err error) bool {
	return errors.Is(err, primitives.ErrLost) || errors.Is(err, primitives.ErrSuspended)
}

// Run keeps building services with newService and running term on them
// until ctx ends, term's fn returns without a loss, or an error that no
// retry can cure comes up. When fn returns without a loss while ctx is
// live (Result.CtxEnded false), Run returns what the term returned, even
// if ctx ended meanwhile; when ctx had ended by then, Run returns
// ctx.Err(), joined with fn's error if that is another. helper names the
// caller in errors (e.g. "election.Supervise"). Every service built is closed before Run returns,
// and before the next one is built; also when term panics (fn did), which
// Run lets go on. A non-nil service that newService returns along with an
// error is closed at once and never used.
func Run[S Service](ctx context.Context, helper string, newService func(context.Context) (S, error),
	term func(context.Context, S) Result, opts []Option) error {
	cfg, err := build(helper, opts)
	if err != nil {
		return err
	}
	if newService == nil {
		return fmt.Errorf("%s: nil newService: %w", helper, primitives.ErrInvalidArgument)
	}
	r := runner[S]{cfg: cfg, helper: helper}
	defer r.retire()
	failures := 0 // consecutive attempts that did not run a long enough term
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var why error
		if !r.live {
			s, err := newService(ctx)
			if err != nil && !nilness.Is(s) {
				// Built, then something failed: Run does not use it, and
				// does not leak it either. Its Close error adds nothing to
				// err.
				_ = s.Close()
			}
			switch {
			case err == nil && nilness.Is(s):
				return fmt.Errorf("%s: newService returned a nil Service and no error: %w", helper, primitives.ErrInvalidArgument)
			case err == nil:
				r.adopt(s)
			case ctx.Err() != nil:
				return ctx.Err()
			case errors.Is(err, primitives.ErrInvalidArgument):
				return fmt.Errorf("%s: new service: %w", helper, err)
			default:
				why = fmt.Errorf("%s: new service: %w", helper, err)
			}
		}
		if why == nil {
			res := term(ctx, r.s)
			lost := lostTerm(res.holdPart())
			if res.Ran && !lost && !res.CtxEnded {
				// fn's own end, while ctx was live: nil, its error, or a
				// failed release. ctx's end after it (during the release)
				// does not undo work that fn reported done.
				return r.finish(res.Err)
			}
			if ctx.Err() != nil {
				if res.FnErr != nil && !errors.Is(res.FnErr, ctx.Err()) {
					return errors.Join(ctx.Err(), res.FnErr)
				}
				return ctx.Err()
			}
			if !res.Ran && errors.Is(res.Err, primitives.ErrInvalidArgument) {
				return res.Err
			}
			if res.Ran && time.Since(res.Began) >= cfg.max {
				failures = 0 // a long term: the trouble was not persistent
			}
			why = res.Err
			if why == nil {
				why = fmt.Errorf("%s: the hold ended before fn could run: %w", helper, primitives.ErrLost)
			}
			if r.s.Err() != nil {
				r.retire() // the session is gone: the next attempt builds anew
			}
		}
		failures++
		if cfg.onRetry != nil {
			cfg.onRetry(failures, why)
		}
		if r.live {
			if !awaitResume(ctx, r.s) {
				return ctx.Err()
			}
			if r.s.Err() != nil {
				r.retire() // lost while suspended
			}
		}
		if !ctxtime.Sleep(ctx, cfg.delay(failures)) {
			return ctx.Err()
		}
	}
}

// suspensionReporter is a Service that tells when its session's
// suspension ends (driver.Shell.SuspensionOver).
type suspensionReporter interface {
	SuspensionOver() <-chan struct{}
}

// awaitResume waits while s's session is suspended, until it resumes or s
// is done, whatever ended the last attempt: a hold taken on a suspended
// session is no use to a service built to cancel there (fn would start
// with its context ended), and to any other it would run fn on a session
// that may be lost any moment; locking again each backoff would only issue
// tokens nobody can use. It returns false if ctx ended first.
func awaitResume(ctx context.Context, s Service) bool {
	sr, ok := s.(suspensionReporter)
	if !ok {
		return true
	}
	select {
	case <-sr.SuspensionOver():
	case <-s.Done():
	case <-ctx.Done():
		return false
	}
	return true
}

// runner holds the current service and the goroutine that forwards its
// events to OnEvent.
type runner[S Service] struct {
	cfg       config
	helper    string
	s         S
	live      bool
	forwarded chan struct{}
	stopSub   context.CancelFunc
}

// adopt makes s the current service and, with OnEvent, starts forwarding
// its events. The subscription outlives Supervise's ctx, so that the events
// of the final resign and Close still arrive.
func (r *runner[S]) adopt(s S) {
	r.s, r.live = s, true
	if r.cfg.onEvent == nil {
		return
	}
	subCtx, stop := context.WithCancel(context.Background())
	events := s.Subscribe(subCtx)
	r.stopSub = stop
	r.forwarded = make(chan struct{})
	go func() {
		defer close(r.forwarded)
		for e := range events {
			r.cfg.onEvent(e)
		}
	}()
}

// retire closes the current service, if any, and waits until every event
// it published has reached OnEvent. It returns Close's error.
func (r *runner[S]) retire() error {
	if !r.live {
		return nil
	}
	r.live = false
	err := r.s.Close()
	if r.forwarded != nil {
		<-r.forwarded // Close ends the subscription after its last event
		r.stopSub()
		r.forwarded, r.stopSub = nil, nil
	}
	var zero S
	r.s = zero
	return err
}

// finish retires the service after fn's own end and returns err, or the
// Close error if err is nil and Close failed.
func (r *runner[S]) finish(err error) error {
	if cerr := r.retire(); cerr != nil && err == nil && !errors.Is(cerr, primitives.ErrClosed) {
		return fmt.Errorf("%s: close: %w", r.helper, cerr)
	}
	return err
}
