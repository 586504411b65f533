package redisio

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// DefaultTTL is a session's time to live when WithTTL is not given; it is
// driver.DefaultTTL, the default of every backend.
const DefaultTTL = driver.DefaultTTL

// MinTTL is the shortest TTL WithTTL accepts.
const MinTTL = 100 * time.Millisecond

// maxName bounds a primitive's name.
const maxName = 1024

// Option configures NewSession, NewLock, NewRWLock and NewElection.
type Option func(*options)

type options struct {
	driver.Config
	ctxSet  bool // WithContext was given
	session *Session
	// maxValue is the largest election value Campaign and Proclaim accept.
	maxValue int
	permits  int // a semaphore's N, set by NewSemaphore
	value    string
	valueSet bool
	errs     []error
}

// WithValue makes a lock's holder and waiters carry value, as an election's
// leader carries its Campaign value: it is stored in the hold's hash (field
// v, as a candidate's value is), so that whoever reads the name's holds
// (disco status) sees who holds and who waits, for example "host:pid". A
// value larger than the largest accepted (DefaultMaxValueSize, or
// WithMaxValueSize) is refused by NewLock with an error wrapping
// primitives.ErrInvalidArgument, before anything is written. Only NewLock
// takes it: the other constructors refuse it.
func WithValue(value string) Option {
	return func(o *options) { o.value, o.valueSet = value, true }
}

// DefaultMaxValueSize is the largest value (Campaign's, Proclaim's, a lock's
// WithValue) a primitive accepts without WithMaxValueSize: the same limit as etcdio's,
// so that a program moves between backends unchanged. Redis itself takes
// values up to its proto-max-bulk-len (512 MB by default).
const DefaultMaxValueSize = 1 << 20

// WithMaxValueSize sets the largest value, in bytes, that Campaign, Proclaim
// and a lock's WithValue accept; a larger one is refused before it is sent, with an
// error wrapping primitives.ErrInvalidArgument.
func WithMaxValueSize(n int) Option {
	return func(o *options) {
		if n < 1 {
			o.errs = append(o.errs, fmt.Errorf("redisio: WithMaxValueSize(%d): must be at least 1: %w", n, primitives.ErrInvalidArgument))
			return
		}
		o.maxValue = n
	}
}

// WithTTL sets the session's time to live: its key's PX expiry, refreshed
// every TTL/3. At least MinTTL; whole milliseconds. Not allowed together
// with WithSession, whose session has its own TTL.
func WithTTL(d time.Duration) Option {
	return func(o *options) {
		if d < MinTTL {
			o.errs = append(o.errs, fmt.Errorf("redisio: TTL %v below %v: %w", d, MinTTL, primitives.ErrInvalidArgument))
			return
		}
		o.TTL, o.TTLSet = d.Truncate(time.Millisecond), true
	}
}

// WithSuspendAfter sets the part of the TTL (0 < p < 1, default
// driver.DefaultSuspendAfter, a half) that the session may go without an
// acknowledged refresh before its holders get Suspended. The session
// refreshes every third of the TTL, or with a part below 1/2 every two
// thirds of that part, so a healthy session is never Suspended. Not
// allowed together with WithSession, whose session has its own.
func WithSuspendAfter(p float64) Option {
	return func(o *options) { o.SuspendAfter, o.SuspendSet = p, true }
}

// WithMetrics reports the session's and the primitives' measures to m (see
// package metrics); nil, the default, records nothing. A primitive made
// WithSession without WithMetrics reports to its session's.
func WithMetrics(m *metrics.Metrics) Option {
	return func(o *options) { o.Metrics = m }
}

// WithSession runs a primitive on an existing session, sharing its event
// loop, its key and its pub/sub connection. Close of the primitive then
// keeps the session.
func WithSession(s *Session) Option {
	return func(o *options) {
		if s == nil {
			o.errs = append(o.errs, fmt.Errorf("redisio: nil session: %w", primitives.ErrInvalidArgument))
			return
		}
		o.session = s
	}
}

// WithLogger logs through l; the default is silent.
func WithLogger(l *zap.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.Logger = l
		}
	}
}

// WithCancelOnSuspend makes lock.Do, rwlock.DoRead, rwlock.DoWrite and
// election.Lead end fn's context already at Suspended (with a cause
// wrapping primitives.ErrSuspended), not only at Lost, for owners that
// would rather stop than risk a late write while the session is in doubt.
func WithCancelOnSuspend() Option { return func(o *options) { o.CancelOnSuspend = true } }

// constructTimeout bounds construction without WithContext, as on every
// backend.
const constructTimeout = 10 * time.Second

// WithContext bounds construction (creating the session, subscribing to
// the scope's channel, joining the session's loop), never the session's
// life. Without it construction gives up after 10 seconds. go-redis honors
// a context's deadline only on a client made with
// redis.Options.ContextTimeoutEnabled; on others, a server that accepts the
// connection and does not answer holds construction for the client's own
// timeouts (ReadTimeout, 5 s by default in go-redis v9.23, and its
// retries) instead. Either way the error names the server and says it did
// not answer.
func WithContext(ctx context.Context) Option {
	return func(o *options) {
		if ctx != nil {
			o.Context, o.ctxSet = ctx, true
		}
	}
}

// construction returns the context that bounds construction:
// WithContext's, else one that ends after constructTimeout.
func (o options) construction() (context.Context, context.CancelFunc) {
	if o.ctxSet {
		return o.Context, func() {}
	}
	return context.WithTimeout(o.Context, constructTimeout)
}

func buildOptions(opts []Option) (options, error) {
	o := options{Config: driver.NewConfig(), maxValue: DefaultMaxValueSize}
	for _, f := range opts {
		if f == nil {
			return o, fmt.Errorf("redisio: nil option: %w", primitives.ErrInvalidArgument)
		}
		f(&o)
	}
	if len(o.errs) > 0 {
		return o, o.errs[0]
	}
	o.Config.MinTTL = MinTTL
	if err := o.Check(o.session != nil, primitives.ErrInvalidArgument); err != nil {
		return o, fmt.Errorf("redisio: %w", err)
	}
	return o, nil
}

// checkName validates a primitive's name: not empty, not "/", at most 1 KiB,
// and not in disco's own key trees (see reserved).
func checkName(name string) error {
	switch {
	case name == "" || name == "/":
		return fmt.Errorf("redisio: name %q: %w", name, primitives.ErrInvalidArgument)
	case len(name) > maxName:
		return fmt.Errorf("redisio: name %s: more than %d bytes: %w", quote.Name(name), maxName, primitives.ErrInvalidArgument)
	case reserved(name):
		return fmt.Errorf("redisio: name %q is under %q or %q, which disco keeps for its sessions: %w",
			name, sessionTree, sessionCounter, primitives.ErrInvalidArgument)
	}
	return nil
}

// sessionTree is the name under which the session keys live: their keys
// are sessionTree/<id>.
const sessionTree = "disco/session"

// reserved reports whether name is disco/session or disco/sessions, or a
// name below either. A name's keys are name/<suffix> with a suffix without
// "/" (seq, queue, held, rtok, or a hold's number), so a name collides with
// a session key (disco/session/<id>) exactly when it is disco/session, and
// with the session counter never; the trees below both are refused too, so
// that a pattern over disco/session/* (or disco/sessions*) sees disco's keys
// alone. Any other name's keys are its own: names are independent, a/b of a
// as much as b of a.
func reserved(name string) bool {
	for _, tree := range []string{sessionTree, sessionCounter} {
		if name == tree || strings.HasPrefix(name, tree+"/") {
			return true
		}
	}
	return false
}
