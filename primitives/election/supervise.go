package election

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
// consecutive failed attempt and starts again from min after a term that
// lasted at least max. min <= 0 or max < min is an error wrapping
// primitives.ErrInvalidArgument.
func WithBackoff(min, max time.Duration) SuperviseOption {
	return SuperviseOption{supervise.WithBackoff(min, max)}
}

// WithJitter sets the part of each wait drawn at random, from 0 to 1
// (default 0.2): a wait d becomes a uniform choice in [d*(1-f), d], so that
// candidates that lost together do not campaign again together. It never
// makes a wait longer than WithBackoff's max.
func WithJitter(f float64) SuperviseOption { return SuperviseOption{supervise.WithJitter(f)} }

// OnEvent sets a function that receives every event of every Service that
// Supervise builds (Acquired, Released, Lost, Suspended, Resumed,
// LeaderChanged), in order across Services: one Service's last event comes
// before the next one's first. It is called from one goroutine at a time,
// possibly while fn runs, and never after Supervise returns. Supervise waits
// for it before it builds the next Service and before it returns, so it must
// not block for long. A type switch in it must ignore kinds it does not know.
func OnEvent(f func(primitives.Event)) SuperviseOption { return SuperviseOption{supervise.OnEvent(f)} }

// OnRetry sets a function that Supervise calls, from its own goroutine,
// before each wait: attempt counts the consecutive failed attempts from 1,
// err is what ended the last one (a lost term, a failed Campaign, a failed
// newService).
func OnRetry(f func(attempt int, err error)) SuperviseOption {
	return SuperviseOption{supervise.OnRetry(f)}
}

// Supervise keeps this candidate in the election until ctx ends: it builds
// a Service with newService, leads with it as Lead does (campaign with
// value, run fn with a context that ends with the term, resign after fn
// returns), and when the term is lost campaigns again, after a backoff
// (WithBackoff, WithJitter). If the Service itself is done (its session was
// lost), Supervise closes it and builds a new one first. Each term runs fn
// from the start, with the new term's Leadership and its higher token.
//
// Supervise returns:
//   - nil when fn returns nil with the term intact while ctx is live: fn's
//     work is done, and Supervise does not campaign again;
//   - fn's error when fn returns one with the term intact while ctx is live
//     (joined with the resign's error if that failed);
//   - ctx.Err() once ctx has ended (joined with fn's error if fn returned
//     one that is not ctx.Err()), after fn has returned and the term was
//     resigned; so it composes with errgroup, where a sibling's failure
//     cancels ctx. The result is decided when fn returns: if ctx ends after
//     that, during the resign, the two cases above stand; an fn that returns
//     nil after ctx ended may have stopped early, and gets ctx.Err();
//   - an error wrapping primitives.ErrInvalidArgument for a nil newService
//     or fn, a bad option, or a newService error that wraps
//     primitives.ErrInvalidArgument.
//
// A term counts as lost, and Supervise campaigns again, when Lead's error
// wraps primitives.ErrLost (the term ended: its key was deleted, its session
// lost), or primitives.ErrSuspended (the Service was built to cancel at
// Suspended, with a backend's WithCancelOnSuspend), whatever fn returned. Any
// other newService or Campaign error is retried too, with backoff, and
// reported to OnRetry. While the Service's session is suspended, Supervise
// campaigns again only once it resumes (or, lost, with a new Service): a
// term won on a suspended session could not run fn. Bad input is permanent: backends' constructor errors
// for it (a bad prefix) wrap primitives.ErrInvalidArgument, and so stop
// Supervise, as does any newService error that wraps it.
// newService gets Supervise's ctx; it should use it to
// bound construction only (a backend's WithContext), never the Service's life.
// Supervise owns every Service it builds and closes each before it builds
// the next and before it returns, so nothing it campaigned with is left in
// the backend. A Service that newService returns along with an error
// (built, then a later step failed) is closed at once and never used; such
// a Service must be safe to Close. If fn panics, Supervise does not recover: the term is
// resigned (as Lead resigns it), the Service closed and its events
// delivered to OnEvent, and the panic goes on out of Supervise unchanged.
//
// Compared with Curator's LeaderSelector with autoRequeue and client-go's
// leaderelection, which also requeue a candidate after it loses:
//   - every term carries a fencing token, strictly greater than any earlier
//     term's, so a resource behind a guard (package fencing/guard) rejects a
//     deposed leader that has not noticed yet; client-go's elector offers no
//     token and relies on the leader stopping in time;
//   - safety does not rest on clocks: every backend counts the lease's end from the
//     send time of the last acknowledged renewal, on the owner's own clock,
//     so clocks need not agree, only run at about the same rate over one
//     TTL; and if a pause breaks even that, the token still rejects the old
//     leader, where client-go's elector has only its timers;
//   - with a Service built to cancel at Suspended, fn's context ends while
//     the lease surely still holds (before Suspended's Deadline), so fn can
//     stop before anyone else can lead; Curator's SUSPENDED is a connection
//     state that a listener must map to cancellation itself.
//
// What it costs: a lost session means a new Service, so a new session and
// lease, and a new place at the back of the queue; each retry waits its
// backoff, so leadership may stay with another candidate or with nobody for
// that long; and fn is restarted from scratch in every term, so any state it
// needs across terms must live outside it (behind the guard).
func Supervise(ctx context.Context, newService func(ctx context.Context) (Service, error), value string,
	fn func(ctx context.Context, l Leadership) error, opts ...SuperviseOption) error {
	if err := hold.CheckFn(ctx, "election.Supervise", fn == nil); err != nil {
		return err
	}
	term := func(superviseCtx context.Context, s Service) (res supervise.Result) {
		res.Err = Lead(superviseCtx, s, value, func(ctx context.Context, l Leadership) error {
			res.Ran, res.Began = true, time.Now()
			res.FnErr = fn(ctx, l)
			res.CtxEnded = superviseCtx.Err() != nil // before the release: see supervise.Run
			return res.FnErr
		})
		return res
	}
	return supervise.Run(ctx, "election.Supervise", newService, term, unwrap(opts))
}

// unwrap returns the engine's options of opts.
func unwrap(opts []SuperviseOption) []supervise.Option {
	out := make([]supervise.Option, len(opts))
	for i, o := range opts {
		out[i] = o.o
	}
	return out
}
