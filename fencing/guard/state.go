package guard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ahrtr/disco/fencing"
)

// state is the per-scope machinery behind Guard and Keyed: one mark, the
// admitted requests and the drain of lower tokens. Its zero value has mark 0.
type state struct {
	// mark is the high-water mark: the highest token seen. It only grows.
	// It has a cache line of its own (padding on both sides, as the state
	// need not start on a cache line), so that neither the bookkeeping of
	// Admit (active, mu) nor a neighbouring allocation slows down Check's
	// read-only fast path.
	_    [cacheLine]byte
	mark atomic.Int64
	_    [cacheLine - 8]byte
	// active counts Admit calls in progress and admitted requests that have
	// not called done. Check takes its slow path (the mutex) after raising
	// the mark only when active is non-zero. Admit raises active before it
	// reads the mark, and Check raises the mark before it reads active, so
	// (all sync/atomic operations being sequentially consistent) either
	// Check sees the admission or the admission sees the new mark.
	active atomic.Int64

	mu sync.Mutex
	// running holds the admitted requests that have neither been superseded
	// nor called done. They all carry the token cur.
	running map[*ticket]struct{}
	cur     fencing.Token
	// draining counts admitted requests that were superseded (their
	// contexts cancelled) but have not called done yet. A token is admitted
	// only when draining is zero.
	draining int
	// wake, when not nil, is closed to make waiting Admit calls look again.
	wake chan struct{}

	// With a store: durable is the highest mark known to be in the store,
	// and loaded tells whether the store's mark has been read.
	durable atomic.Int64
	loaded  atomic.Bool
	// The calls of the store and the verifier in progress that requests
	// share (see call), under callMu, which is never held across a call:
	// the first Load of the stored mark; on a shared store, the read in
	// flight and the one that starts after it; the verifications, by
	// token.
	callMu    sync.Mutex
	loading   *call
	reading   *call
	nextRead  *call
	verifying map[fencing.Token]*call
	// detached counts the shared calls given up on and taken from the
	// state that have not returned (see maxDetached).
	detached int
	// refs counts the users of a Keyed's state (calls in progress and
	// admitted requests); a state with refs 0 may be dropped.
	refs atomic.Int64
	// reported is the mark last reported to metrics (written under
	// Metrics.mu).
	reported atomic.Int64
}

// cacheLine is a common cache line size, used for padding.
const cacheLine = 64

// ticket is one admitted request.
type ticket struct {
	cancel context.CancelCauseFunc
	done   bool // guarded by state.mu
}

// staleErr is the rejection of a token below the mark. It wraps
// fencing.ErrTokenStale and keeps both numbers, so that metrics can tell
// how far below the mark the token was.
type staleErr struct{ t, mark fencing.Token }

func (e *staleErr) Error() string {
	return fmt.Sprintf("guard: token %d is below the mark %d: %v", e.t, e.mark, fencing.ErrTokenStale)
}

func (e *staleErr) Unwrap() error { return fencing.ErrTokenStale }

func staleError(t, mark fencing.Token) error { return &staleErr{t: t, mark: mark} }

func noTokenError(t fencing.Token) error {
	return fmt.Errorf("guard: %d is not a token (tokens are > 0): %w", t, fencing.ErrNoToken)
}

// check is Check on this state, without a store.
func (g *state) check(t fencing.Token) error {
	if t <= 0 {
		return noTokenError(t)
	}
	for {
		m := g.mark.Load()
		if int64(t) == m {
			return nil
		}
		if int64(t) < m {
			return staleError(t, fencing.Token(m))
		}
		if g.mark.CompareAndSwap(m, int64(t)) {
			if g.active.Load() > 0 {
				g.raised()
			}
			return nil
		}
	}
}

// raised cancels the admitted requests below the mark, which was just
// raised, and wakes the waiting Admit calls.
func (g *state) raised() {
	g.mu.Lock()
	g.supersedeLocked(fencing.Token(g.mark.Load()))
	g.broadcastLocked()
	g.mu.Unlock()
}

// observe raises the mark to m, a mark seen in the store (another guard
// raised it), as a check of m would, without accepting anything: requests
// admitted with lower tokens are cancelled as superseded.
func (g *state) observe(m fencing.Token) {
	for {
		cur := g.mark.Load()
		if int64(m) <= cur {
			return
		}
		if g.mark.CompareAndSwap(cur, int64(m)) {
			if g.active.Load() > 0 {
				g.raised()
			}
			return
		}
	}
}

// supersedeLocked cancels the running requests if their token is below m
// and moves them to draining.
func (g *state) supersedeLocked(m fencing.Token) {
	if len(g.running) == 0 || g.cur >= m {
		return
	}
	cause := fmt.Errorf("guard: token %d superseded by token %d: %w", g.cur, m, fencing.ErrTokenStale)
	for tk := range g.running {
		tk.cancel(cause)
	}
	g.draining += len(g.running)
	clear(g.running)
}

// broadcastLocked wakes every waiting Admit so it looks at the state again.
func (g *state) broadcastLocked() {
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

func noop() {}

// admit is Admit on this state, without a store.
func (g *state) admit(ctx context.Context, t fencing.Token) (context.Context, func(), error) {
	if t <= 0 {
		return nil, noop, noTokenError(t)
	}
	g.active.Add(1) // before reading the mark: see state.active
	g.mu.Lock()
	for {
		m := fencing.Token(g.mark.Load())
		if t < m {
			g.mu.Unlock()
			g.active.Add(-1)
			return nil, noop, staleError(t, m)
		}
		if t > m {
			if !g.mark.CompareAndSwap(int64(m), int64(t)) {
				continue // a concurrent Check moved the mark
			}
			g.broadcastLocked() // waiters below t are stale now
		}
		g.supersedeLocked(t)
		if g.draining == 0 {
			break
		}
		n := g.draining
		if g.wake == nil {
			g.wake = make(chan struct{})
		}
		wake := g.wake
		g.mu.Unlock()
		select {
		case <-wake:
			g.mu.Lock()
		case <-ctx.Done():
			g.active.Add(-1)
			return nil, noop, fmt.Errorf("guard: token %d not admitted: gave up waiting for %d in-flight requests with lower tokens to finish: %w", t, n, ctx.Err())
		}
	}
	actx, cancel := context.WithCancelCause(ctx)
	tk := &ticket{cancel: cancel}
	if g.running == nil {
		g.running = make(map[*ticket]struct{})
	}
	g.cur = t
	g.running[tk] = struct{}{}
	g.mu.Unlock()
	return actx, func() { g.release(tk) }, nil
}

// release is the done function of an admitted request.
func (g *state) release(tk *ticket) {
	g.mu.Lock()
	if tk.done {
		g.mu.Unlock()
		return
	}
	tk.done = true
	if _, ok := g.running[tk]; ok {
		delete(g.running, tk)
	} else {
		g.draining--
		if g.draining == 0 {
			g.broadcastLocked()
		}
	}
	g.mu.Unlock()
	tk.cancel(nil)
	g.active.Add(-1)
}
