package guard

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

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

// ErrStore is wrapped (together with the store's own error) by the errors of
// a guard whose store failed: the request was not admitted and the mark was
// not raised in memory. HTTP middleware answers 503, gRPC interceptors
// Unavailable; the client may retry.
var ErrStore = errors.New("guard: mark store failed")

func scopeNote(scope string) string {
	if scope == "" {
		return ""
	}
	return fmt.Sprintf(" of scope %q", scope)
}

// ensure makes sure that the store holds at least t for s before t may be
// accepted: it loads the stored mark once, and raises it when t is above
// every mark known to be durable. A stale t is left to the state to reject.
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
	if err := c.store.Raise(ctx, scope, t); err != nil {
		return fmt.Errorf("guard: token %d not accepted: raising the stored mark%s: %w: %w", t, scopeNote(scope), ErrStore, err)
	}
	raiseTo(&s.durable, int64(t))
	return nil
}

// load reads the stored mark of s once and raises the in-memory mark to it.
// No request of s has been accepted before (ensure runs first), so nothing
// is in flight to supersede.
func (c *config) load(ctx context.Context, s *state, scope string) error {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	if s.loaded.Load() {
		return nil
	}
	m, err := c.store.Load(ctx, scope)
	if err != nil {
		return fmt.Errorf("guard: loading the stored mark%s: %w: %w", scopeNote(scope), ErrStore, err)
	}
	raiseTo(&s.durable, int64(m))
	raiseTo(&s.mark, int64(m))
	s.loaded.Store(true)
	return nil
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
