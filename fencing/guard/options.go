package guard

import (
	"context"
	"time"

	"go.uber.org/zap"

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
	// storeTimeout bounds every wait on the store or the verifier; <= 0:
	// DefaultStoreTimeout.
	storeTimeout time.Duration
	// exclusive: the user asserts that no other guard uses the store, so
	// tokens equal to the mark are answered from memory.
	exclusive bool
	verifier  Verifier
	logger    *zap.Logger
	// outages logs the rejections of an outage of the store, of the
	// verifier (storeOutage, verifierOutage) to logger.
	outages [2]outageLog
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
//
// The guard may share s with other guards, in this process or others (the
// replicas of one resource): it never accepts a token below the mark s
// holds, whoever raised it. Each Check or Admit asks s: a token above the
// guard's mark raises the mark in s (and is rejected if s holds a higher
// one), a token equal to it reads the mark from s. See "Several guards on
// one store" in the package documentation for what that costs, and
// WithExclusiveStore for a guard that is the store's only user.
func WithStore(s MarkStore) Option {
	return func(c *config) { c.store = s }
}

// WithExclusiveStore asserts that this guard is the only user of its store
// (WithStore): no other guard, in this process or another, raises the marks
// it keeps there. The guard then answers tokens equal to a scope's mark
// from memory, with no store access, and goes to the store only to read a
// scope's mark once and to raise it: the cost of an in-memory guard plus one
// durable write per new grant.
//
// If the assertion is false, fencing is lost without an error: when another
// guard (another replica of the resource) raises a scope's mark in the
// store, this guard does not see it and keeps admitting the tokens equal to
// its own, older mark, so a zombie holder of the previous grant is admitted
// by this replica while its successor writes through the other. Use it for
// a single-process resource only; without a store it does nothing.
func WithExclusiveStore() Option {
	return func(c *config) { c.exclusive = true }
}

// WithVerifier makes the guard ask v, before it raises a scope's mark,
// whether the token is that of a current grant (see Verifier): once per
// raise, before the raise in memory or in the store, and never for a token
// at or below the mark, so steady traffic at the mark costs nothing more.
// A token v says is of no current grant is rejected with an error wrapping
// fencing.ErrTokenForged (HTTP 409, gRPC FailedPrecondition, metrics reason
// "forged"); one v cannot judge (its store is down, or it did not answer
// within the request's context or the store timeout) is rejected with an
// error wrapping ErrUnverified (HTTP 503, gRPC Unavailable, reason
// "unverified"). Either way the mark stays where it was. Concurrent requests
// that raise a scope's mark to one token share one call of v. A nil v
// means no verifier.
func WithVerifier(v Verifier) Option {
	return func(c *config) { c.verifier = v }
}

// WithStoreTimeout bounds every wait of the guard on its store (a Load, a
// Raise or a read, and a request's wait for another request's call of the
// same scope) and on its verifier (WithVerifier). A wait that outlasts it
// (or the request's context, whichever ends first) is a rejection wrapping
// ErrStore (or ErrUnverified) and context.DeadlineExceeded, never a hang,
// even if the store or verifier itself does not heed its context. d <= 0
// means DefaultStoreTimeout. It is the bound of Check, which takes no
// context.
func WithStoreTimeout(d time.Duration) Option {
	return func(c *config) { c.storeTimeout = d }
}

// WithLogger makes the guard log to l the requests that its HTTP
// middleware or gRPC interceptors reject because the store or the
// verifier failed, with the error: the client is told only that (see
// HTTPMiddleware). It logs an outage, not each request: the first
// rejection, at Warn; while the store (or verifier) keeps failing, at
// most one line every 10 s, at Warn, with the number of rejections since
// the last line and the latest error; and, when it answers again, one
// line at Info with the outage's rejections and its length. A nil l, or
// none, means no logs.
func WithLogger(l *zap.Logger) Option {
	return func(c *config) { c.logger = l }
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

// check is Check on s: the verifier and the store, then the state, then
// metrics.
func (c *config) check(ctx context.Context, s *state, scope string, t fencing.Token) error {
	if err := c.prepare(ctx, s, scope, t); err != nil {
		return c.reject(s, scope, t, err)
	}
	if err := s.check(t); err != nil {
		return c.reject(s, scope, t, err)
	}
	c.metrics.admit(s, scope, 0)
	return nil
}

// reject settles a request of t that failed with err: a success of its
// verification is forgotten (a token refused once is asked again), and the
// rejection counted. It returns err.
func (c *config) reject(s *state, scope string, t fencing.Token, err error) error {
	s.forgetVerified(t)
	c.metrics.reject(err)
	c.metrics.sawMark(s, scope)
	return err
}

// admit is Admit on s: the verifier and the store, then the state, then
// metrics.
func (c *config) admit(ctx context.Context, s *state, scope string, t fencing.Token) (context.Context, func(), error) {
	var start time.Time
	if c.metrics != nil {
		start = time.Now()
	}
	if err := c.prepare(ctx, s, scope, t); err != nil {
		return nil, noop, c.reject(s, scope, t, err)
	}
	actx, done, err := s.admit(ctx, t)
	if err != nil {
		return nil, noop, c.reject(s, scope, t, err)
	}
	if c.metrics != nil {
		c.metrics.admit(s, scope, time.Since(start))
	}
	return actx, done, nil
}
