package etcdio

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// DefaultTTL is the lease TTL of a session made without WithTTL: the same
// on every disco backend (driver.DefaultTTL).
const DefaultTTL = driver.DefaultTTL

// ErrInvalidArgument is wrapped by every constructor error caused by bad
// input: a nil or closed client, a bad prefix, a bad TTL, clashing options.
// It wraps primitives.ErrInvalidArgument, so backend-free code can tell bad
// input from trouble.
var ErrInvalidArgument = fmt.Errorf("etcdio: %w", primitives.ErrInvalidArgument)

// maxPrefix is the longest prefix a primitive accepts, in bytes.
const maxPrefix = 1024

// Option configures NewSession, NewLock, NewRWLock and NewElection.
type Option func(*options)

type options struct {
	driver.Config // TTL, SuspendAfter, CancelOnSuspend, Metrics, Logger, Context
	session       *Session
	sessionSet    bool
	maxValue      int
	maxValueSet   bool
	value         string
	valueSet      bool
}

// DefaultMaxValueSize is the largest value (Campaign's, Proclaim's, a
// lock's WithValue) a primitive accepts without WithMaxValueSize: etcd refuses a request over
// its --max-request-bytes (1.5 MiB by default), and a value must fit in one
// with its key.
const DefaultMaxValueSize = 1 << 20

// WithMaxValueSize sets the largest value, in bytes, that Campaign,
// Proclaim and a lock's WithValue accept, for a cluster whose --max-request-bytes is other
// than etcd's default. A larger value is refused before it is sent, with an
// error wrapping primitives.ErrInvalidArgument.
func WithMaxValueSize(n int) Option {
	return func(o *options) { o.maxValue, o.maxValueSet = n, true }
}

// WithValue makes a lock's holder and waiters carry value, as an election's
// leader carries its Campaign value: it is the value of the lock's key, so
// that whoever reads the prefix (disco status, etcdctl get) sees who holds
// and who waits, for example "host:pid". etcd's concurrency.Mutex and
// etcdctl lock ignore a key's value, so they and a lock with a value
// exclude each other as before. A value larger than the largest accepted
// (DefaultMaxValueSize, or WithMaxValueSize) is refused by NewLock with an
// error wrapping primitives.ErrInvalidArgument. Only NewLock takes it: the
// other constructors refuse it (an election's value is Campaign's).
func WithValue(value string) Option {
	return func(o *options) { o.value, o.valueSet = value, true }
}

// WithTTL sets the lease's time to live: whole seconds, at least one. After
// the owner stops sending keepalives (it crashed, paused or was cut off), its
// holds end at most TTL later. etcd raises a TTL below its minimum (one and
// a half election timeouts, rounded up to whole seconds: 2s with etcd's
// default election timeout of 1s) to that minimum; Session.TTL and a
// grant's TTL are the TTL granted. Not allowed together with WithSession,
// whose session already has its TTL.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.TTL, o.TTLSet = d, true }
}

// WithSession makes a primitive run on an existing session's event loop and
// lease instead of starting its own. Close of the primitive then releases
// what the primitive holds but keeps the session; the caller closes it.
func WithSession(s *Session) Option {
	return func(o *options) { o.session, o.sessionSet = s, true }
}

// WithLogger sends the session's logs to l. Without it disco logs nothing.
func WithLogger(l *zap.Logger) Option {
	return func(o *options) { o.Logger = l }
}

// WithContext bounds construction: the lease grant of a new session (and,
// for a primitive, joining its session's loop) gives up when ctx ends. It
// never bounds the life of what is constructed. Without it construction
// gives up after 10 seconds, as etcd's concurrency.NewSession does not.
func WithContext(ctx context.Context) Option {
	return func(o *options) { o.Context = ctx }
}

// WithCancelOnSuspend makes lock.Do, rwlock.DoRead, rwlock.DoWrite and
// election.Lead end fn's context already at Suspended (the session has gone
// unconfirmed for a while and may be lost soon) rather than only at Lost,
// for owners that would rather pause than risk a late write. Do and Lead then
// return an error wrapping primitives.ErrSuspended. It configures primitives,
// not sessions.
func WithCancelOnSuspend() Option {
	return func(o *options) { o.CancelOnSuspend = true }
}

// WithSuspendAfter sets how long a session may go without an acknowledged
// keepalive, as a part of its TTL (greater than 0, less than 1), before its
// holders get Suspended. The default is 1/2: a keepalive is sent every third
// of the TTL, so a healthy session is confirmed well before. With a smaller
// part, keepalives go every two thirds of it instead, so a healthy session
// is never Suspended. Not allowed together with WithSession.
func WithSuspendAfter(part float64) Option {
	return func(o *options) { o.SuspendAfter, o.SuspendSet = part, true }
}

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
	if o.TTLSet && (o.TTL < time.Second || o.TTL%time.Second != 0) {
		return o, fmt.Errorf("TTL %v: must be whole seconds, at least 1s: %w", o.TTL, ErrInvalidArgument)
	}
	if err := o.Check(o.session != nil, ErrInvalidArgument); err != nil {
		return o, err
	}
	if o.maxValueSet && o.maxValue < 1 {
		return o, fmt.Errorf("WithMaxValueSize(%d): must be at least 1: %w", o.maxValue, ErrInvalidArgument)
	}
	return o, nil
}
