package memio

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives/driver"
)

// DefaultTTL is a session's time to live without WithTTL, as on every
// disco backend.
const DefaultTTL = driver.DefaultTTL

// DefaultMaxValueSize is the largest election value Campaign and Proclaim
// accept without WithMaxValueSize, as on etcd and Redis.
const DefaultMaxValueSize = 1 << 20

// maxName is the longest name a primitive accepts, in bytes.
const maxName = 1024

// Option configures NewSession and the primitives' constructors.
type Option func(*options)

type options struct {
	driver.Config
	session    *Session
	sessionSet bool
	maxValue   int
}

// WithTTL sets the session's time to live: at least 1 s. Not with
// WithSession.
func WithTTL(d time.Duration) Option { return func(o *options) { o.TTL, o.TTLSet = d, true } }

// WithSuspendAfter sets the part of the TTL (0 < part < 1, default 1/2) a
// session may go unrenewed before its holders get Suspended. Not with
// WithSession.
func WithSuspendAfter(part float64) Option {
	return func(o *options) { o.SuspendAfter, o.SuspendSet = part, true }
}

// WithCancelOnSuspend makes lock.Do, rwlock.DoRead, rwlock.DoWrite and
// election.Lead end fn's context already at Suspended, not only at Lost.
func WithCancelOnSuspend() Option { return func(o *options) { o.CancelOnSuspend = true } }

// WithMetrics makes the session and the primitive report to m.
func WithMetrics(m *metrics.Metrics) Option { return func(o *options) { o.Metrics = m } }

// WithLogger sends the session's logs to l. Without it memio logs nothing.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.Logger = l } }

// WithContext bounds construction. memio's construction never waits, so
// it only refuses a ctx that has already ended.
func WithContext(ctx context.Context) Option { return func(o *options) { o.Context = ctx } }

// WithSession makes a primitive run on s instead of a session of its own;
// its Close then keeps s.
func WithSession(s *Session) Option { return func(o *options) { o.session, o.sessionSet = s, true } }

// WithMaxValueSize sets the largest election value, in bytes, Campaign and
// Proclaim accept.
func WithMaxValueSize(n int) Option { return func(o *options) { o.maxValue = n } }

func buildOptions(opts []Option) (options, error) {
	o := options{Config: driver.NewConfig(), maxValue: DefaultMaxValueSize}
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("nil Option: %w", ErrInvalidArgument)
		}
		opt(&o)
	}
	if o.sessionSet && o.session == nil {
		return o, fmt.Errorf("WithSession(nil): %w", ErrInvalidArgument)
	}
	if err := o.Check(o.session != nil, ErrInvalidArgument); err != nil {
		return o, err
	}
	if o.maxValue < 1 {
		return o, fmt.Errorf("WithMaxValueSize(%d): must be at least 1: %w", o.maxValue, ErrInvalidArgument)
	}
	if err := o.Context.Err(); err != nil {
		return o, err
	}
	return o, nil
}
