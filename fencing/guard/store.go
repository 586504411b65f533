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
// only then, so with steady traffic the store sees one Raise per new grant.
// A guard that shares the store with other guards (the default; see
// WithExclusiveStore) also calls Load for each request whose token equals
// its mark, and Raise for each token above its mark, followed by Load
// unless the store is a [RaiseLoader]. For that, Load must be
// linearizable: it returns at least every mark whose Raise returned before
// the Load began, whichever process raised it.
type MarkStore interface {
	// Load returns the stored mark of scope, or 0 if none was ever raised.
	Load(ctx context.Context, scope string) (fencing.Token, error)
	// Raise sets the stored mark of scope to t if t is above it, and never
	// lowers it. When Raise returns nil, the mark is at least t durably: a
	// Load after a crash of the process (or machine, as far as the
	// implementation promises) returns at least t.
	Raise(ctx context.Context, scope string, t fencing.Token) error
}

// RaiseLoader is a MarkStore that can raise a mark and report the stored
// mark in one step. A guard that shares its store with other guards uses
// it, when its store implements it, for each token above its mark: one
// round trip instead of Raise then Load. The stores of package markstore
// and etcdio.MarkStore implement it.
//
// Without it, the guard calls Raise, then Load, and rejects the token if
// the loaded mark is higher: sound, because Raise never lowers a mark, so
// a Load that returns more than t saw a raise by another guard.
type RaiseLoader interface {
	MarkStore
	// RaiseLoad is Raise, then returns the stored mark of scope after it,
	// at least t, atomically: no raise of another process falls between
	// the two.
	RaiseLoad(ctx context.Context, scope string, t fencing.Token) (fencing.Token, error)
}

// ErrStore is wrapped (together with the store's own error, the context
// error of a store that did not answer in time, or the value of a store
// call that panicked) by the errors of a guard whose store failed: the request was not admitted and the mark was not
// raised in memory. HTTP middleware answers 503, gRPC interceptors
// Unavailable, and metrics count it with reason "store"; the client may
// retry.
var ErrStore = errors.New("guard: mark store failed")

// DefaultStoreTimeout bounds every wait of a guard on its store (a Load, a
// Raise, or another request's Load of the same scope) and on its verifier
// unless WithStoreTimeout says otherwise. It is what bounds Check, which
// takes no context.
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

// prepare does what a request with token t needs before the state decides
// on t: it asks the verifier about a token above the mark and, with a
// store, makes sure that the store holds at least t (exclusive store) or
// that the store holds no higher mark (shared store: a higher one is
// raised into the state's mark). A stale t is left to the state to reject.
// Every wait ends when ctx does or the store timeout passes.
func (c *config) prepare(ctx context.Context, s *state, scope string, t fencing.Token) error {
	switch {
	case t <= 0:
		return nil
	case c.store == nil:
		return c.verifyAbove(ctx, s, scope, t)
	case c.exclusive:
		return c.prepareExclusive(ctx, s, scope, t)
	default:
		return c.prepareShared(ctx, s, scope, t)
	}
}

// verifyAbove asks the verifier, if any, about t if t is above the mark.
func (c *config) verifyAbove(ctx context.Context, s *state, scope string, t fencing.Token) error {
	if c.verifier == nil || int64(t) <= s.mark.Load() {
		return nil
	}
	return c.verify(ctx, s, scope, t)
}

// prepareExclusive: the store's mark is read once; a token equal to the
// mark needs nothing more, a token above it is raised in the store.
func (c *config) prepareExclusive(ctx context.Context, s *state, scope string, t fencing.Token) error {
	if !s.loaded.Load() {
		if err := c.load(ctx, s, scope); err != nil {
			return err
		}
	}
	if int64(t) < s.mark.Load() {
		return nil
	}
	if err := c.verifyAbove(ctx, s, scope, t); err != nil {
		return err
	}
	if int64(t) <= s.durable.Load() {
		return nil
	}
	_, err := c.raise(ctx, s, scope, t, false)
	return err
}

// prepareShared: every token at or above the mark meets the store, which
// arbitrates between the guards that share it. A token above every mark
// known to be stored is raised there, and the store reports its mark; a
// token equal to it reads the store's mark. A stored mark above t, raised
// by another guard, becomes the state's mark, and the state rejects t.
func (c *config) prepareShared(ctx context.Context, s *state, scope string, t fencing.Token) error {
	if int64(t) < s.mark.Load() {
		return nil
	}
	if d := s.durable.Load(); int64(t) < d {
		s.observe(fencing.Token(d))
		return nil
	}
	if err := c.verifyAbove(ctx, s, scope, t); err != nil {
		return err
	}
	var stored fencing.Token
	var err error
	if int64(t) > s.durable.Load() || !s.loaded.Load() {
		stored, err = c.raise(ctx, s, scope, t, true)
	} else {
		stored, err = c.read(ctx, s, scope)
	}
	if err != nil {
		return err
	}
	s.stored(stored)
	return nil
}

// stored records m, a mark read from the store: it is durable, and this
// guard has seen it.
func (s *state) stored(m fencing.Token) {
	raiseTo(&s.durable, int64(m))
	s.loaded.Store(true)
	s.observe(m)
}

// call is one call of the store or the verifier that requests of a scope
// wait for. It runs on a goroutine of its own, with a context that keeps
// the values of the request that started it but not its end, bounded by
// the store timeout: so it can serve several requests, and a store or
// verifier that ignores its context cannot hold a request past the
// request's own context or the store timeout (it keeps one goroutine until
// it returns).
type call struct {
	done chan struct{} // closed once it returned; val and err are set then
	val  fencing.Token
	err  error
	vals context.Context
	// Under state.callMu: the requests waiting for it; when the last one
	// gives up before it returned, it is abandoned (its context
	// cancelled) and onAbandon, if set, runs (under state.callMu): a
	// shared call is taken from the state then (detached), so that later
	// requests call the store afresh rather than wait for a call that may
	// never return (a store that ignores its context), unless
	// maxDetached calls of the state are detached and still running.
	// cancel is nil until it starts.
	waiters   int
	abandoned bool
	detached  bool
	cancel    context.CancelFunc
	onAbandon func()
}

// maxDetached bounds the calls of a scope that every waiter gave up on
// and that have not returned (see call), so that a store that hangs for
// good and ignores contexts holds a few goroutines per scope, not one per
// store timeout for as long as requests come. Beyond it, requests wait
// for such a read again, and a raise, which no other request can share,
// fails at once (errStuck).
const maxDetached = 4

// errStuck is the error of a raise not started because the store has not
// returned maxDetached calls of the scope that their callers gave up on.
var errStuck = errors.New("earlier calls of the store for this scope have not returned")

func newCall(ctx context.Context) *call {
	return &call{done: make(chan struct{}), vals: context.WithoutCancel(ctx)}
}

// start runs f for cl on a goroutine of its own; finish runs under
// s.callMu once f returned, before done is closed. Called with s.callMu
// held, or before cl is shared.
func (c *config) start(s *state, cl *call, f func(context.Context) (fencing.Token, error), finish func()) {
	ctx, cancel := c.bound(cl.vals)
	cl.cancel = cancel
	go func() {
		defer cancel()
		v, err := protect(ctx, f)
		s.callMu.Lock()
		if cl.detached {
			s.detached--
		}
		cl.val, cl.err = v, err
		if finish != nil {
			finish()
		}
		s.callMu.Unlock()
		close(cl.done)
	}()
}

// protect calls f, turning a panic of f (a store's or a verifier's bug)
// into an error: f runs on a goroutine of the guard's, where no one (not
// net/http, not the caller) could recover it, so it would take the whole
// process down.
func protect(ctx context.Context, f func(context.Context) (fencing.Token, error)) (v fencing.Token, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = 0, fmt.Errorf("panic: %v", r)
		}
	}()
	return f(ctx)
}

// await counts the caller as a waiter of the call join returns (join runs
// under s.callMu) and waits until it returns or ctx ends. A call that all
// its waiters abandoned before the caller joined it has failed with their
// cancellation: the caller joins afresh. The error is ctx's (wrapped) if
// the caller gave up; the call's own result is in the call.
func (s *state) await(ctx context.Context, join func() *call) (*call, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("no answer: %w", err)
		}
		s.callMu.Lock()
		cl := join()
		cl.waiters++
		s.callMu.Unlock()
		select {
		case <-cl.done:
		case <-ctx.Done():
			select {
			case <-cl.done: // it answered as time ran out: take its answer
			default:
				s.leave(cl)
				return nil, fmt.Errorf("no answer: %w", ctx.Err())
			}
		}
		if s.leave(cl) {
			continue
		}
		return cl, nil
	}
}

// leave drops the caller from cl's waiters, abandoning cl if it was the
// last one and cl has started but not returned, and reports whether cl
// had been abandoned before.
func (s *state) leave(cl *call) bool {
	s.callMu.Lock()
	defer s.callMu.Unlock()
	was := cl.abandoned
	cl.waiters--
	if cl.waiters == 0 && !was && cl.cancel != nil {
		select {
		case <-cl.done:
		default:
			cl.abandoned = true
			cl.cancel()
			if cl.onAbandon != nil && s.detached < maxDetached {
				s.detached++
				cl.detached = true
				cl.onAbandon()
			}
		}
	}
	return was
}

// raise raises the stored mark of s to t and, if report is set, returns
// the stored mark after the raise (RaiseLoad, or Raise then Load); else t.
// Its wait ends when ctx does or the store timeout passes; if the raise
// succeeds after the caller gave up, the durable mark still records it.
func (c *config) raise(ctx context.Context, s *state, scope string, t fencing.Token, report bool) (fencing.Token, error) {
	fail := func(err error) error {
		return fmt.Errorf("guard: token %d not accepted: raising the stored mark%s: %w: %w", t, scopeNote(scope), ErrStore, err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	cl, err := s.await(ctx, func() *call {
		cl := newCall(ctx)
		if s.detached >= maxDetached {
			// The store has not returned raises (or reads) that their
			// callers gave up on: another would only hold one more
			// goroutine.
			cl.err = errStuck
			close(cl.done)
			return cl
		}
		cl.onAbandon = func() {} // counted as detached until it returns
		c.start(s, cl, func(ctx context.Context) (fencing.Token, error) {
			m, err := c.raiseStore(ctx, scope, t, report)
			if err == nil {
				raiseTo(&s.durable, int64(m))
				c.answered(storeOutage)
			}
			return m, err
		}, nil)
		return cl
	})
	if err == nil {
		err = cl.err
	}
	if err != nil {
		return 0, fail(err)
	}
	return cl.val, nil
}

// raiseStore is the store's part of raise.
func (c *config) raiseStore(ctx context.Context, scope string, t fencing.Token, report bool) (fencing.Token, error) {
	var m fencing.Token
	var err error
	switch rl, ok := c.store.(RaiseLoader); {
	case !report:
		return t, c.store.Raise(ctx, scope, t)
	case ok:
		m, err = rl.RaiseLoad(ctx, scope, t)
	default:
		if err = c.store.Raise(ctx, scope, t); err == nil {
			m, err = c.store.Load(ctx, scope)
		}
	}
	if err == nil && m < t {
		err = fmt.Errorf("the store reports the mark %d after a raise to %d succeeded: its Load is not linearizable", m, t)
	}
	return m, err
}

// load reads the stored mark of s once and raises the in-memory mark to
// it. One Load per scope runs at a time; every request that needs it waits
// for it only until its own ctx ends or the store timeout passes,
// whichever is first.
func (c *config) load(ctx context.Context, s *state, scope string) error {
	fail := func(err error) error {
		return fmt.Errorf("guard: loading the stored mark%s: %w: %w", scopeNote(scope), ErrStore, err)
	}
	ctx, cancel := c.bound(ctx)
	defer cancel()
	for !s.loaded.Load() {
		cl, err := s.await(ctx, func() *call {
			if s.loading == nil {
				cl := newCall(ctx)
				s.loading = cl
				forget := func() {
					if s.loading == cl {
						s.loading = nil
					}
				}
				cl.onAbandon = forget
				c.start(s, cl, func(ctx context.Context) (fencing.Token, error) {
					return c.loadStored(ctx, s, scope)
				}, forget)
			}
			return s.loading
		})
		if err == nil {
			err = cl.err
		}
		if err != nil {
			return fail(err)
		}
	}
	return nil
}

// read reads the stored mark of s (a shared store's arbitration of a token
// equal to the mark). Reads are shared, but never one that began before
// the caller asked: one read of a scope is in flight at a time, and the
// requests that arrive meanwhile share the read that starts once it
// returns. So each request's answer is a read that began after it, and the
// store sees at most one read of a scope at a time however many requests
// arrive, but for reads that every waiter gave up on: the next read starts
// then, without waiting for such a read to return (a store that ignores
// its context might never return it), up to maxDetached such reads.
func (c *config) read(ctx context.Context, s *state, scope string) (fencing.Token, error) {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	cl, err := s.await(ctx, func() *call {
		if s.reading == nil {
			s.reading = newCall(ctx)
			c.startRead(s, scope, s.reading)
			return s.reading
		}
		if s.nextRead == nil {
			s.nextRead = newCall(ctx)
		}
		return s.nextRead
	})
	if err == nil {
		err = cl.err
	}
	if err != nil {
		return 0, fmt.Errorf("guard: reading the stored mark%s: %w: %w", scopeNote(scope), ErrStore, err)
	}
	return cl.val, nil
}

// startRead starts cl, the read of s; once it returns, or every waiter
// gave up on it, the next read starts if anyone waits for it.
func (c *config) startRead(s *state, scope string, cl *call) {
	over := func() {
		if s.reading != cl {
			return // given up on, and followed by another read already
		}
		next := s.nextRead
		s.reading, s.nextRead = nil, nil
		if next != nil && next.waiters > 0 {
			s.reading = next
			c.startRead(s, scope, next)
		}
	}
	cl.onAbandon = over
	c.start(s, cl, func(ctx context.Context) (fencing.Token, error) {
		return c.loadStored(ctx, s, scope)
	}, over)
}

// loadStored loads the stored mark of s and records it (stored).
func (c *config) loadStored(ctx context.Context, s *state, scope string) (fencing.Token, error) {
	m, err := c.store.Load(ctx, scope)
	if err == nil {
		s.stored(m)
		c.answered(storeOutage)
	}
	return m, err
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
