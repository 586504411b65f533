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
	value      string
	valueSet   bool
}

// WithValue makes a lock's holder and waiters carry value, as an election's
// leader carries its Campaign value: it is the value of the lock's key,
// which Store.Value reads, for example "host:pid". A value larger than the
// largest accepted (DefaultMaxValueSize, or WithMaxValueSize) is refused by
// NewLock with an error wrapping primitives.ErrInvalidArgument. Only
// NewLock takes it: the other constructors refuse it.
func WithValue(value string) Option {
	return func(o *options) { o.value, o.valueSet = value, true }
}

// checkLockValue refuses WithValue on any constructor but NewLock's (kind
// is the constructor's: a primitive's kind, or "session"), and a value
// larger than the largest accepted.
func checkLockValue(kind string, o options) error {
	switch {
	case !o.valueSet:
		return nil
	case kind != kindLock:
		return fmt.Errorf("WithValue is for locks only, not a %s (an election's value is Campaign's): %w", kind, ErrInvalidArgument)
	case len(o.value) > o.maxValue:
		return fmt.Errorf("WithValue: value of %d bytes, more than the %d accepted (WithMaxValueSize): %w",
			len(o.value), o.maxValue, ErrInvalidArgument)
	}
	return nil
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

// WithMaxValueSize sets the largest value, in bytes, Campaign, Proclaim and
// a lock's WithValue accept.
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
