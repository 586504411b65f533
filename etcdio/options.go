package etcdio

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// DefaultTTL is the lease TTL of a session made without WithTTL. It is the
// same as etcd's concurrency.Session default.
const DefaultTTL = 60 * time.Second

// ErrInvalidArgument is wrapped by every constructor error caused by bad
// input: a nil or closed client, an empty prefix, a bad TTL, clashing options.
var ErrInvalidArgument = errors.New("etcdio: invalid argument")

// Option configures NewSession, NewLock, NewRWLock and NewElection.
type Option func(*options)

type options struct {
	ttl     time.Duration
	ttlSet  bool
	session *Session
	log     *zap.Logger
}

// WithTTL sets the lease's time to live: whole seconds, at least one. After
// the owner stops sending keepalives (it crashed, paused or was cut off), its
// holds end at most TTL later. Not allowed together with WithSession, whose
// session already has its TTL.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.ttl, o.ttlSet = d, true }
}

// WithSession makes a primitive run on an existing session's event loop and
// lease instead of starting its own. Close of the primitive then releases
// what the primitive holds but keeps the session; the caller closes it.
func WithSession(s *Session) Option {
	return func(o *options) { o.session = s }
}

// WithLogger sends the session's logs to l. Without it disco logs nothing.
func WithLogger(l *zap.Logger) Option {
	return func(o *options) { o.log = l }
}

func buildOptions(opts []Option) (options, error) {
	o := options{ttl: DefaultTTL}
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("nil Option: %w", ErrInvalidArgument)
		}
		opt(&o)
	}
	if o.ttlSet {
		if o.ttl < time.Second || o.ttl%time.Second != 0 {
			return o, fmt.Errorf("TTL %v: must be whole seconds, at least 1s: %w", o.ttl, ErrInvalidArgument)
		}
		if o.session != nil {
			return o, fmt.Errorf("WithTTL and WithSession together: the session has its own TTL: %w", ErrInvalidArgument)
		}
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	return o, nil
}
