package election

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ahrtr/disco/primitives"
)

// ErrStuck is wrapped by Healthz.Check's error: a term of this process was
// lost (or suspended, for a Service built to cancel there) and its fn has
// not returned within the Healthz's timeout.
var ErrStuck = errors.New("election: leader's work did not stop after its term ended")

// Healthz is a liveness check of a leader: it fails when a term of this
// process ended involuntarily and the fn that ran in it has not returned
// within a timeout after that. fn's context is cancelled at that moment
// (Lead's, Supervise's), so a fn still running a timeout later is stuck in
// work it should have stopped, beside a successor that may already lead;
// an orchestrator that probes Healthz (a Kubernetes liveness probe) then
// restarts the process. The guard still rejects what the stuck fn writes
// with its old token: Healthz ends it.
//
// A term ends involuntarily when it is lost (its key deleted, its session
// lost), or when it is Suspended on a Service built to cancel there (a
// backend's WithCancelOnSuspend): then the timeout counts from the
// suspension, while the hold may still be good. A term resigned because fn
// returned, or a ctx of the caller's that ended, is not counted: the
// process is stopping on its own.
//
// Healthz knows the fns it wraps (Wrap): give Lead or Supervise the
// wrapped fn. It is like client-go's HealthzAdaptor with the term's own
// events in place of the lease's clock. Its methods are safe for
// concurrent use; one Healthz may watch several fns (several elections).
type Healthz struct {
	timeout time.Duration

	mu   sync.Mutex
	runs map[*run]struct{} // the wrapped fns that run now
}

// run is one call of a wrapped fn: its term and context, and when and why
// that term ended (zero while it holds).
type run struct {
	term  Leadership
	ctx   context.Context
	ended time.Time
	cause error
}

// endedInvoluntarily returns the cause if r's context ended because the
// term was lost or suspended, else nil.
func (r *run) endedInvoluntarily() error {
	cause := context.Cause(r.ctx)
	if errors.Is(cause, primitives.ErrLost) || errors.Is(cause, primitives.ErrSuspended) {
		return cause
	}
	return nil
}

// note records when r's term ended, if it has ended involuntarily and is
// not recorded yet. h.mu held.
func (h *Healthz) note(r *run) {
	if !r.ended.IsZero() || r.ctx.Err() == nil {
		return
	}
	if cause := r.endedInvoluntarily(); cause != nil {
		r.ended, r.cause = time.Now(), cause
	}
}

// NewHealthz returns a Healthz that fails once a wrapped fn has run on
// for timeout after its term ended (0: at once). A negative timeout is an
// error wrapping primitives.ErrInvalidArgument.
func NewHealthz(timeout time.Duration) (*Healthz, error) {
	if timeout < 0 {
		return nil, fmt.Errorf("election: NewHealthz: timeout %v: must not be negative: %w", timeout, primitives.ErrInvalidArgument)
	}
	return &Healthz{timeout: timeout, runs: map[*run]struct{}{}}, nil
}

// Wrap returns fn watched by h: while the returned function runs, h notes
// when its context ends because the term was lost or suspended, and
// forgets the call when fn returns. Pass it to Lead or Supervise in place
// of fn.
func (h *Healthz) Wrap(fn func(ctx context.Context, l Leadership) error) func(ctx context.Context, l Leadership) error {
	return func(ctx context.Context, l Leadership) error {
		r := &run{term: l, ctx: ctx}
		h.mu.Lock()
		h.runs[r] = struct{}{}
		h.mu.Unlock()
		// The end is noted as it happens; Check notes it too, should it
		// come first.
		stop := context.AfterFunc(ctx, func() {
			h.mu.Lock()
			h.note(r)
			h.mu.Unlock()
		})
		defer func() {
			stop()
			h.mu.Lock()
			delete(h.runs, r)
			h.mu.Unlock()
		}()
		return fn(ctx, l)
	}
}

// Check returns nil while no wrapped fn has run on for the timeout after
// its term ended, and otherwise an error wrapping ErrStuck that names the
// term, when it ended and why.
func (h *Healthz) Check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for r := range h.runs {
		h.note(r)
		if r.ended.IsZero() {
			continue
		}
		if over := time.Since(r.ended); over >= h.timeout {
			return fmt.Errorf("%w: term of %s (token %v) ended %v ago (%v), fn still runs; timeout %v",
				ErrStuck, r.term.Key, r.term.FencingToken, over.Round(time.Millisecond), r.cause, h.timeout)
		}
	}
	return nil
}

// ServeHTTP answers a liveness probe: 200 "ok" while Check passes, 500
// with Check's error otherwise.
func (h *Healthz) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.Check(); err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, err)
		return
	}
	fmt.Fprintln(w, "ok")
}
