package guard

import (
	"context"
	"time"

	"github.com/ahrtr/disco/fencing"
)

// Option configures a Guard (New) or a Keyed guard (NewKeyed).
type Option func(*config)

// config is what the options set, and the steps every check and admission
// of a Guard or Keyed takes around the per-scope state: the store first,
// metrics after.
type config struct {
	initial fencing.Token
	store   MarkStore
	metrics *Metrics
	maxIdle int
	// storeTimeout bounds every wait on the store; <= 0: DefaultStoreTimeout.
	storeTimeout time.Duration
}

func (c *config) apply(opts []Option) {
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
}

// WithInitialMark starts the Guard with mark t instead of 0, so that tokens
// below t are rejected from the first request on. Use it to restore a mark
// persisted before a restart (see the package documentation), or use
// WithStore. Values <= 0 leave the mark at 0. For a Keyed guard, t is a
// floor for every scope.
func WithInitialMark(t fencing.Token) Option {
	return func(c *config) {
		if t > 0 {
			c.initial = t
		}
	}
}

// WithStore makes the guard keep its marks in s as well as in memory: a
// token above a scope's mark is raised in s, durably, before it is accepted,
// and a guard built on s after a restart starts from the marks s holds. A
// plain Guard uses the scope "" in s. A nil s means no store.
func WithStore(s MarkStore) Option {
	return func(c *config) { c.store = s }
}

// WithStoreTimeout bounds every wait of the guard on its store: a Load or a
// Raise, and a request's wait for another request's Load of the same scope.
// A wait that outlasts it (or the request's context, whichever ends first)
// is a rejection wrapping ErrStore and context.DeadlineExceeded, never a
// hang, even if the store itself does not heed its context. d <= 0 means
// DefaultStoreTimeout. It is the bound of Check, which takes no context.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.storeTimeout = d }
}

// WithMetrics makes the guard report to m (see NewMetrics). A nil m means
// no metrics.
func WithMetrics(m *Metrics) Option {
	return func(c *config) { c.metrics = m }
}

// DefaultMaxIdleScopes is the number of idle scopes a Keyed guard on a store
// keeps in memory unless WithMaxIdleScopes says otherwise.
const DefaultMaxIdleScopes = 4096

// WithMaxIdleScopes bounds the number of idle scopes (no request in
// progress) a Keyed guard on a store keeps in memory; beyond it, idle scopes
// are dropped and read back from the store when next used. n <= 0 means
// DefaultMaxIdleScopes. Without a store nothing is ever dropped (see Keyed).
func WithMaxIdleScopes(n int) Option {
	return func(c *config) { c.maxIdle = n }
}

func (c *config) newState() *state {
	s := &state{}
	if c.initial > 0 {
		s.mark.Store(int64(c.initial))
	}
	return s
}

// check is Check on s: the store, then the state, then metrics.
func (c *config) check(ctx context.Context, s *state, scope string, t fencing.Token) error {
	if c.store != nil {
		if err := c.ensure(ctx, s, scope, t); err != nil {
			c.metrics.reject(err)
			return err
		}
	}
	if err := s.check(t); err != nil {
		c.metrics.reject(err)
		return err
	}
	c.metrics.admit(s, scope, t, 0)
	return nil
}

// admit is Admit on s: the store, then the state, then metrics.
func (c *config) admit(ctx context.Context, s *state, scope string, t fencing.Token) (context.Context, func(), error) {
	var start time.Time
	if c.metrics != nil {
		start = time.Now()
	}
	if err := c.ensure(ctx, s, scope, t); err != nil {
		c.metrics.reject(err)
		return nil, noop, err
	}
	actx, done, err := s.admit(ctx, t)
	if err != nil {
		c.metrics.reject(err)
		return nil, noop, err
	}
	if c.metrics != nil {
		c.metrics.admit(s, scope, t, time.Since(start))
	}
	return actx, done, nil
}
