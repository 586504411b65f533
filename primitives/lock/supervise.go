package lock

import (
	"context"
	"time"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/internal/hold"
	"github.com/ahrtr/disco/primitives/internal/supervise"
)

// SuperviseOption configures Supervise. The zero SuperviseOption is not
// an option: Supervise refuses it with an error wrapping
// primitives.ErrInvalidArgument.
type SuperviseOption struct{ o supervise.Option }

// WithBackoff sets the wait before Supervise's first retry (min, default
// 100ms) and the most it grows to (max, default 10s). It doubles with each
// consecutive failed attempt and starts again from min after a hold that
// lasted at least max. min <= 0 or max < min is an error wrapping
// primitives.ErrInvalidArgument.
func WithBackoff(min, max time.Duration) SuperviseOption {
	return SuperviseOption{supervise.WithBackoff(min, max)}
}

// WithJitter sets the part of each wait drawn at random, from 0 to 1
// (default 0.2): a wait d becomes a uniform choice in [d*(1-f), d]. It never
// makes a wait longer than WithBackoff's max.
func WithJitter(f float64) SuperviseOption { return SuperviseOption{supervise.WithJitter(f)} }

// OnEvent sets a function that receives every event of every Service that
// Supervise builds, in order across Services: one Service's last event comes
// before the next one's first. It is called from one goroutine at a time,
// possibly while fn runs, and never after Supervise returns. Supervise waits
// for it before it builds the next Service and before it returns, so it must
// not block for long.
func OnEvent(f func(primitives.Event)) SuperviseOption { return SuperviseOption{supervise.OnEvent(f)} }

// OnRetry sets a function that Supervise calls, from its own goroutine,
// before each wait: attempt counts the consecutive failed attempts from 1,
// err is what ended the last one.
func OnRetry(f func(attempt int, err error)) SuperviseOption {
	return SuperviseOption{supervise.OnRetry(f)}
}

// Supervise runs fn as a singleton worker until ctx ends: it builds a
// Service with newService, runs fn under the lock as Do does (fn's context
// ends the moment the hold is lost; the grant is released after fn
// returns), and when the hold is lost locks again after a backoff
// (WithBackoff, WithJitter). If the Service itself is done (its session was
// lost), Supervise closes it and builds a new one first; if its session is
// suspended, Supervise waits until it resumes or is lost before it locks
// again. Each hold runs fn
// from the start, with the new Grant and its higher token.
//
// It returns what election.Supervise returns: nil when fn returns nil with
// the hold intact while ctx is live (the work is done; Supervise does not
// lock again), fn's error when fn returns one with the hold intact while
// ctx is live, ctx.Err() once ctx has ended (joined with fn's own error, if
// any), and an error wrapping primitives.ErrInvalidArgument for bad
// arguments or a newService error that wraps it. The result is decided when
// fn returns: if ctx ends after that, during the release, fn's nil or error
// stands; an fn that returns nil after ctx ended may have stopped early, and
// gets ctx.Err(). A hold whose Do error wraps primitives.ErrLost or
// primitives.ErrSuspended is lost, whatever fn returned, and Supervise
// tries again; so are failed newService and Lock calls, with backoff, except
// errors wrapping primitives.ErrInvalidArgument (backends' bad-input errors
// do). Every Service it builds is closed before the next is built and
// before it returns. A Service that newService returns along with an error
// (built, then a later step failed) is closed at once and never used, so
// nothing it set up is left behind; such a Service must be safe to Close.
// If fn panics, Supervise does not recover: the grant is released (as Do
// releases it), the Service closed and its events delivered to
// OnEvent, and the panic goes on out of Supervise unchanged.
//
// Where it is safer than a lease-based singleton (client-go's
// leaderelection, Curator's LeaderSelector with autoRequeue): each hold's
// fencing token is strictly greater than every earlier one, so a resource
// behind a guard rejects a worker that lost the lock without noticing;
// and a Service built to cancel at Suspended ends fn's context while the
// lease surely still holds. What it costs: a new session per lost session,
// a backoff wait per retry, and fn restarted from scratch each hold.
func Supervise(ctx context.Context, newService func(ctx context.Context) (Service, error),
	fn func(ctx context.Context, g Grant) error, opts ...SuperviseOption) error {
	if err := hold.CheckFn(ctx, "lock.Supervise", fn == nil); err != nil {
		return err
	}
	term := func(superviseCtx context.Context, s Service) (res supervise.Result) {
		res.Err = Do(superviseCtx, s, func(ctx context.Context, g Grant) error {
			res.Ran, res.Began = true, time.Now()
			res.FnErr = fn(ctx, g)
			res.CtxEnded = superviseCtx.Err() != nil // before the release: see supervise.Run
			return res.FnErr
		})
		return res
	}
	return supervise.Run(ctx, "lock.Supervise", newService, term, unwrap(opts))
}

// unwrap returns the engine's options of opts.
func unwrap(opts []SuperviseOption) []supervise.Option {
	out := make([]supervise.Option, len(opts))
	for i, o := range opts {
		out[i] = o.o
	}
	return out
}
