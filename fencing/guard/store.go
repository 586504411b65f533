package guard

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ahrtr/disco/fencing"
)

// MarkStore keeps the marks of a guard durably, one per scope, so that they
// survive a restart of the resource. Implementations: package
// [github.com/ahrtr/disco/fencing/guard/markstore] (a directory of files,
// database/sql) and etcdio.MarkStore (etcd).
//
// A guard calls Raise before it accepts a token above a scope's mark, and
// only then; tokens equal to the mark never reach the store. So with steady
// traffic the store sees one Raise per new grant, not one per request.
type MarkStore interface {
	// Load returns the stored mark of scope, or 0 if none was ever raised.
	Load(ctx context.Context, scope string) (fencing.Token, error)
	// Raise sets the stored mark of scope to t if t is above it, and never
	// lowers it. When Raise returns nil, the mark is at least t durably: a
	// Load after a crash of the process (or machine, as far as the
	// implementation promises) returns at least t.
	Raise(ctx context.Context, scope string, t fencing.Token) error
}

// ErrStore is wrapped (together with the store's own error, or the context
// error of a store that did not answer in time) by the errors of a guard
// whose store failed: the request was not admitted and the mark was not
// raised in memory. HTTP middleware answers 503, gRPC interceptors
// Unavailable, and metrics count it with reason "store"; the client may
// retry.
var ErrStore = errors.New("guard: mark store failed")

// DefaultStoreTimeout bounds every wait of a guard on its store (a Load, a
// Raise, or another request's Load of the same scope) unless
// WithStoreTimeout says otherwise. It is what bounds Check, which takes no
// context.
const DefaultStoreTimeout = 10 * time.Second

func scopeNote(scope string) string {
	if scope == "" {
		return ""
	}
	return fmt.Sprintf(" of scope %q", scope)
}

// bound returns ctx bounded by the store timeout.
func (c *config) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := c.storeTimeout
	if d <= 0 {
		d = DefaultStoreTimeout
	}
	return context.WithTimeout(ctx, d)
}

// ensure makes sure that the store holds at least t for s before t may be
// accepted: it loads the stored mark once, and raises it when t is above
// every mark known to be durable. A stale t is left to the state to reject.
// Every wait on the store ends when ctx does or the store timeout passes.
func (c *config) ensure(ctx context.Context, s *state, scope string, t fencing.Token) error {
	if c.store == nil || t <= 0 {
		return nil
	}
	if !s.loaded.Load() {
		if err := c.load(ctx, s, scope); err != nil {
			return err
		}
	}
	if int64(t) <= s.durable.Load() || int64(t) < s.mark.Load() {
		return nil
	}
	return c.raise(ctx, s, scope, t)
}

// raise raises the stored mark of s to t. The store's Raise runs on a
// goroutine of its own, so that a store that ignores its context (a hung
// disk) cannot hold the caller past ctx or the store timeout; if it
// succeeds after the caller gave up, the durable mark still records it.
func (c *config) raise(ctx context.Context, s *state, scope string, t fencing.Token) error {
	fail := func(err error) error {
		return fmt.Errorf("guard: token %d not accepted: raising the stored mark%s: %w: %w", t, scopeNote(scope), ErrStore, err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	ctx, cancel := c.bound(ctx)
	res := make(chan error, 1)
	go func() {
		defer cancel()
		err := c.store.Raise(ctx, scope, t)
		if err == nil {
			raiseTo(&s.durable, int64(t))
		}
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return fail(err)
		}
		return nil
	case <-ctx.Done():
		select {
		case err := <-res: // it answered as time ran out: take its answer
			if err != nil {
				return fail(err)
			}
			return nil
		default:
		}
		return fail(fmt.Errorf("no answer from the store: %w", ctx.Err()))
	}
}

// loadFlight is one Load of a scope's stored mark in progress, which every
// request of the scope that needs the mark waits for (singleflight).
type loadFlight struct {
	done chan struct{} // closed when the store's Load returned
	err  error         // its error, set before done is closed
	// Under state.loadMu: waiters counts the requests waiting for it; when
	// the last gives up, the Load is abandoned and its context cancelled.
	waiters   int
	abandoned bool
	cancel    context.CancelFunc
}

// load reads the stored mark of s once and raises the in-memory mark to it.
// No request of s has been accepted before (ensure runs first), so nothing
// is in flight to supersede. One Load per scope runs at a time, on a
// goroutine of its own; every request that needs it waits for it only until
// its own ctx ends or the store timeout passes, whichever is first.
func (c *config) load(ctx context.Context, s *state, scope string) error {
	fail := func(err error) error {
		return fmt.Errorf("guard: loading the stored mark%s: %w: %w", scopeNote(scope), ErrStore, err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for !s.loaded.Load() {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		f := c.joinLoad(ctx, s, scope)
		select {
		case <-f.done:
			abandoned := s.leaveLoad(f)
			if f.err == nil {
				return nil
			}
			if !abandoned {
				return fail(f.err)
			}
			// The Load was abandoned by all its waiters before this request
			// joined it: its error is their cancellation. Try again.
		case <-ctx.Done():
			s.leaveLoad(f)
			return fail(fmt.Errorf("no answer from the store: %w", ctx.Err()))
		}
	}
	return nil
}

// joinLoad returns the Load of s in progress, starting one if there is
// none, with the caller counted as its waiter.
func (c *config) joinLoad(ctx context.Context, s *state, scope string) *loadFlight {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if f := s.flight; f != nil {
		f.waiters++
		return f
	}
	// The Load's own context keeps ctx's values but not its end: it serves
	// every waiter, and ends when the last gives up or the timeout passes.
	fctx, cancel := c.bound(context.WithoutCancel(ctx))
	f := &loadFlight{done: make(chan struct{}), waiters: 1, cancel: cancel}
	s.flight = f
	go func() {
		defer cancel()
		m, err := c.store.Load(fctx, scope)
		if err == nil {
			raiseTo(&s.durable, int64(m))
			raiseTo(&s.mark, int64(m))
			s.loaded.Store(true)
		}
		f.err = err
		s.loadMu.Lock()
		s.flight = nil
		s.loadMu.Unlock()
		close(f.done)
	}()
	return f
}

// leaveLoad drops the caller from f's waiters, abandoning f if it was the
// last one, and reports whether f had been abandoned.
func (s *state) leaveLoad(f *loadFlight) bool {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	was := f.abandoned
	f.waiters--
	if f.waiters == 0 && !was {
		select {
		case <-f.done:
		default:
			f.abandoned = true
			f.cancel()
		}
	}
	return was
}

// raiseTo sets a to v if v is greater.
func raiseTo(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
