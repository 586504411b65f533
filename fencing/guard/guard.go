// Package guard is the resource side of fencing: it keeps a high-water mark
// of the fencing tokens a resource has seen and rejects requests that carry a
// token below it.
//
// # Guarantees
//
// Disco's coordination primitives issue tokens that strictly increase with
// every new grant, and clients carry the token of their current grant on
// every request (see package [github.com/ahrtr/disco/fencing]). Given that,
// a Guard guarantees:
//
//   - Its mark never goes down. [Guard.Check] and [Guard.Admit] accept a token
//     t >= mark and raise the mark to t; they reject t < mark with an error
//     wrapping [fencing.ErrTokenStale] that names both numbers. Once any
//     request with token T has been seen, no request with a token below T is
//     accepted again by this Guard.
//   - Tokens equal to the mark are all accepted, concurrently: readers of an
//     rwlock that share one token never exclude each other. A Check with a
//     token equal to the mark does no atomic write (one load, one compare),
//     so it scales across cores.
//   - [Guard.Admit] closes the check-then-act window that a bare Check leaves
//     open. With Check, a request can pass the check, be overtaken by a
//     request with a higher token, and still apply its effect afterwards.
//     With Admit, a request runs with a context that is cancelled (with a
//     cause wrapping fencing.ErrTokenStale) the moment a higher token is
//     seen, and a request with a higher token is admitted only after every
//     in-flight request with a lower token has called its done function. So
//     the critical sections of different tokens never overlap, provided the
//     handlers stop (and call done) when their context is cancelled, and do
//     not act on the resource after calling done.
//
// [Guard.HTTPMiddleware], [Guard.UnaryInterceptor] and
// [Guard.StreamInterceptor] apply Admit to every request.
//
// # Persisting the mark
//
// A Guard keeps its mark in memory. If the resource restarts with a fresh
// Guard, the mark is 0 again, and a zombie client still holding an old token
// (paused, partitioned, unaware that its grant ended) would be accepted
// again: the protection would be silently gone. A resource that outlives its
// process must therefore persist its mark durably, alongside the data it
// protects and atomically with it (in the same transaction, the same row,
// the same file write), so that no write is ever durable without the mark
// that admitted it. After a restart, read the persisted mark back and pass it
// to [WithInitialMark]. Persisting the highest token that was applied is
// enough; [Guard.Mark] reports the current value.
//
// # What a Guard does not do
//
// Tokens are plain numbers: a Guard cannot tell a forged higher token from a
// real one. It trusts its clients to carry only tokens they were issued;
// a client that invents a large token fences out every legitimate holder
// until the coordination service's tokens catch up. Where clients are not
// trusted, tokens must be authenticated (for example signed by the issuer),
// which is beyond this package. A Guard also orders requests only by token:
// it does not know who holds a grant now, only that a higher token has been
// seen.
package guard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ahrtr/disco/fencing"
)

// Guard is a fencing-token validator for one resource. Its zero value is
// ready to use with mark 0; New applies options. A Guard is safe for
// concurrent use and must not be copied after first use.
type Guard struct {
	// mark is the high-water mark: the highest token seen. It only grows.
	// It has a cache line of its own, so that the bookkeeping of Admit
	// (active, mu) does not slow down Check's read-only fast path.
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
}

// cacheLine is a common cache line size, used for padding.
const cacheLine = 64

// ticket is one admitted request.
type ticket struct {
	cancel context.CancelCauseFunc
	done   bool // guarded by Guard.mu
}

// Option configures a Guard in New.
type Option func(*Guard)

// WithInitialMark starts the Guard with mark t instead of 0, so that tokens
// below t are rejected from the first request on. Use it to restore a mark
// persisted before a restart (see the package documentation). Values <= 0
// leave the mark at 0.
func WithInitialMark(t fencing.Token) Option {
	return func(g *Guard) {
		if t > 0 {
			g.mark.Store(int64(t))
		}
	}
}

// New returns a Guard with the given options applied.
func New(opts ...Option) *Guard {
	g := &Guard{}
	for _, o := range opts {
		if o != nil {
			o(g)
		}
	}
	return g
}

// Mark returns the high-water mark: the highest token this Guard has seen
// (in Check or Admit, admitted or not), or the initial mark if it is higher.
// It never decreases.
func (g *Guard) Mark() fencing.Token {
	return fencing.Token(g.mark.Load())
}

func staleError(t, mark fencing.Token) error {
	return fmt.Errorf("guard: token %d is below the mark %d: %w", t, mark, fencing.ErrTokenStale)
}

func noTokenError(t fencing.Token) error {
	return fmt.Errorf("guard: %d is not a token (tokens are > 0): %w", t, fencing.ErrNoToken)
}

// Check accepts t if it is at least the mark, raising the mark to t, and
// otherwise returns an error wrapping fencing.ErrTokenStale that names t and
// the mark (for example "guard: token 5 is below the mark 7"). A token <= 0
// gives an error wrapping fencing.ErrNoToken.
//
// Check is lock-free: a CAS loop on the mark. A token equal to the mark
// costs one atomic load and no write. When Check raises the mark above the
// token of requests admitted by Admit and still in flight, it cancels their
// contexts (cause wrapping fencing.ErrTokenStale) but does not wait for them
// to finish: Check is a bare check, and a request accepted by Check may still
// run alongside requests admitted earlier with a lower token. Use Admit for
// a critical section.
func (g *Guard) Check(t fencing.Token) error {
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
				g.mu.Lock()
				g.supersedeLocked(fencing.Token(g.mark.Load()))
				g.broadcastLocked()
				g.mu.Unlock()
			}
			return nil
		}
	}
}

// supersedeLocked cancels the running requests if their token is below m
// and moves them to draining.
func (g *Guard) supersedeLocked(m fencing.Token) {
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
func (g *Guard) broadcastLocked() {
	if g.wake != nil {
		close(g.wake)
		g.wake = nil
	}
}

func noop() {}

// Admit is Check plus a critical section. If t is below the mark it fails at
// once with an error wrapping fencing.ErrTokenStale (and if t <= 0, wrapping
// fencing.ErrNoToken). Otherwise it raises the mark to t and, once no request
// with a lower token is in flight, admits the request: it returns a context
// derived from ctx and a done function that the caller must call when the
// request has finished acting on the resource.
//
// The returned context is cancelled as soon as a higher token is seen (by
// Admit or Check); its cause (context.Cause) then wraps
// fencing.ErrTokenStale. A higher token asking to be admitted waits until
// every in-flight request with a lower token has called done. Requests with
// equal tokens run concurrently and never wait for each other.
//
// The wait is bounded by ctx: if ctx ends first, Admit returns an error
// wrapping ctx.Err() and the request is not admitted. The mark stays raised
// to t even then, and the lower-token requests stay cancelled: t has been
// seen, and a token that has been seen must fence out older ones whether or
// not its own request went through. If a still higher token is seen while
// Admit waits, the waiting request has become stale and Admit returns an
// error wrapping fencing.ErrTokenStale.
//
// done is idempotent and also cancels the returned context, releasing its
// resources. On error the returned context is nil and done is a no-op (safe
// to call).
func (g *Guard) Admit(ctx context.Context, t fencing.Token) (context.Context, func(), error) {
	if t <= 0 {
		return nil, noop, noTokenError(t)
	}
	g.active.Add(1) // before reading the mark: see Guard.active
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
func (g *Guard) release(tk *ticket) {
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
