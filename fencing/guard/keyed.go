package guard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/quote"
)

// Keyed is a guard for a resource that follows many locks: it keeps one mark
// per scope (the name of the lock, rwlock or election that issued a token;
// see fencing.ScopeHTTPHeader), and each scope behaves exactly as a Guard:
// Check and Admit per scope have Guard's semantics (equal tokens concurrent,
// Admit's drain of lower tokens, cancellation of superseded requests), and
// scopes never affect each other. A Keyed is safe for concurrent use.
//
// # Memory
//
// Without a store, a Keyed keeps every scope it has seen, forever: dropping
// one would reset its mark to 0 and let a zombie's token in. Use it so only
// where the scopes are few. With a store (WithStore), every mark it ever
// enforced is in the store (a mark is raised in the store before the token
// that raised it is accepted), so a scope with no request in progress can be
// dropped from memory and read back from the store when it is next used: the
// mark read back is at least the one dropped, and no token below a mark once
// enforced is ever accepted. Memory is then bounded: at most about twice the
// larger of WithMaxIdleScopes and the number of scopes in use at once.
type Keyed struct {
	cfg config

	mu      sync.RWMutex
	scopes  map[string]*state
	sweepAt int // with a store: drop idle scopes when len(scopes) exceeds it
}

// MaxScopeLen is the longest scope a Keyed accepts, in bytes: the longest
// name (prefix) a primitive accepts.
const MaxScopeLen = 1024

// NewKeyed returns a Keyed guard with the given options applied.
func NewKeyed(opts ...Option) *Keyed {
	k := &Keyed{scopes: make(map[string]*state)}
	k.cfg.apply(opts)
	if k.cfg.maxIdle <= 0 {
		k.cfg.maxIdle = DefaultMaxIdleScopes
	}
	k.sweepAt = k.cfg.maxIdle
	return k
}

// validRequest rejects, before a scope's state is looked at (or made), a
// request no scope could accept: a scope no token can name, or no usable
// token (t <= 0). Without a store a Keyed never drops a scope, so such
// requests must leave none behind.
func (k *Keyed) validRequest(scope string, t fencing.Token) error {
	err := validScope(scope)
	if err == nil && t <= 0 {
		err = noTokenError(t)
	}
	if err != nil {
		k.cfg.metrics.reject(err)
	}
	return err
}

// validScope rejects the scopes no token can name: "" (the resource named
// none: answered like a missing token) and overlong ones.
func validScope(scope string) error {
	if scope == "" {
		return fmt.Errorf("guard: the resource named no scope for this request: %w", fencing.ErrNoScope)
	}
	if len(scope) > MaxScopeLen {
		return fmt.Errorf("guard: scope %s is longer than %d bytes: %w", quote.Name(scope), MaxScopeLen, fencing.ErrMalformedScope)
	}
	return nil
}

// get returns the state of scope with one more reference, creating it if
// create is set (otherwise it may return nil).
func (k *Keyed) get(scope string, create bool) *state {
	k.mu.RLock()
	s := k.scopes[scope]
	if s != nil {
		s.refs.Add(1)
	}
	k.mu.RUnlock()
	if s != nil || !create {
		return s
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if s = k.scopes[scope]; s == nil {
		s = k.cfg.newState()
		k.scopes[scope] = s
	}
	s.refs.Add(1)
	if k.cfg.store != nil && len(k.scopes) > k.sweepAt {
		k.sweepLocked()
	}
	return s
}

// put drops a reference taken by get.
func (k *Keyed) put(s *state) { s.refs.Add(-1) }

// sweepLocked drops idle scopes (no reference: no call in progress, no
// admitted request) until at most half of maxIdle are left. References are
// only taken under k.mu, so a scope seen idle here stays idle until it is
// gone. Only with a store, which holds every mark a dropped scope enforced.
func (k *Keyed) sweepLocked() {
	target := k.cfg.maxIdle / 2
	for scope, s := range k.scopes {
		if len(k.scopes) <= target {
			break
		}
		if s.refs.Load() == 0 {
			delete(k.scopes, scope)
		}
	}
	// Scopes in use cannot be dropped: if many are, look again only after
	// the map has doubled, so that sweeping stays amortized O(1).
	k.sweepAt = max(k.cfg.maxIdle, 2*len(k.scopes))
}

// Check is Guard.Check for the mark of scope. A scope that is empty gives an
// error wrapping fencing.ErrNoScope (and so fencing.ErrNoToken); one longer
// than MaxScopeLen an error wrapping fencing.ErrMalformedScope.
func (k *Keyed) Check(scope string, t fencing.Token) error {
	return k.CheckContext(context.Background(), scope, t)
}

// CheckContext is Guard.CheckContext for the mark of scope; scope errors as
// Check. A nil ctx is an error wrapping primitives.ErrInvalidArgument, before
// scope and t are looked at: no scope is kept for it.
func (k *Keyed) CheckContext(ctx context.Context, scope string, t fencing.Token) error {
	if ctx == nil {
		return nilContext("Keyed.CheckContext")
	}
	if err := k.validRequest(scope, t); err != nil {
		return err
	}
	s := k.get(scope, true)
	defer k.put(s)
	return k.cfg.check(ctx, s, scope, t)
}

// Admit is Guard.Admit for the mark of scope; scope errors as Check. The
// scope's state stays in memory until done is called. A nil ctx is an
// error wrapping primitives.ErrInvalidArgument, as for CheckContext.
func (k *Keyed) Admit(ctx context.Context, scope string, t fencing.Token) (context.Context, func(), error) {
	if ctx == nil {
		return nil, noop, nilContext("Keyed.Admit")
	}
	if err := k.validRequest(scope, t); err != nil {
		return nil, noop, err
	}
	s := k.get(scope, true)
	actx, done, err := k.cfg.admit(ctx, s, scope, t)
	if err != nil {
		k.put(s)
		return nil, noop, err
	}
	var once atomic.Bool
	return actx, func() {
		if once.CompareAndSwap(false, true) {
			done()
			k.put(s)
		}
	}, nil
}

// Mark returns the mark of scope: as Guard.Mark, 0 for a scope never seen.
// With a store, a scope not in memory is read from the store, waiting at
// most the store timeout (0 if that fails); use MarkContext to see the
// error.
func (k *Keyed) Mark(scope string) fencing.Token {
	m, _ := k.MarkContext(context.Background(), scope)
	return m
}

// MarkContext is Mark, reading the store (if any) within ctx and the store
// timeout. Errors wrap ErrStore. A nil ctx gives 0 and an error wrapping
// primitives.ErrInvalidArgument, with or without a store: no scope is read
// or kept.
func (k *Keyed) MarkContext(ctx context.Context, scope string) (fencing.Token, error) {
	if ctx == nil {
		return 0, nilContext("Keyed.MarkContext")
	}
	if err := validScope(scope); err != nil {
		return 0, err
	}
	s := k.get(scope, k.cfg.store != nil)
	if s == nil {
		return k.cfg.initial, nil
	}
	defer k.put(s)
	if k.cfg.store != nil && !s.loaded.Load() {
		if err := k.cfg.load(ctx, s, scope); err != nil {
			return fencing.Token(s.mark.Load()), err
		}
	}
	return fencing.Token(s.mark.Load()), nil
}

// Scopes returns the number of scopes held in memory now.
func (k *Keyed) Scopes() int {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return len(k.scopes)
}
