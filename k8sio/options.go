package k8sio

import (
	"context"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives/driver"
)

// DefaultTTL is a session's time to live without WithTTL, as on every
// disco backend: the leaseDurationSeconds its Leases carry.
const DefaultTTL = driver.DefaultTTL

// MaxValueSize is the largest election value Campaign and Proclaim accept,
// in bytes: the value is an annotation, and a Lease's annotations
// together may hold 256 KiB.
const MaxValueSize = 64 << 10

// Option configures NewSession and NewElection.
type Option func(*options)

type options struct {
	driver.Config
	session    *Session
	sessionSet bool
	identity   string
}

// WithTTL sets the session's time to live, in whole seconds, at least 1 s
// and at most math.MaxInt32 s: the leaseDurationSeconds of every Lease it
// holds. Not with WithSession.
func WithTTL(d time.Duration) Option { return func(o *options) { o.TTL, o.TTLSet = d, true } }

// WithSuspendAfter sets the part of the TTL (0 < part < 1, default 1/2) a
// session may go without an acknowledged renewal before its holders get
// Suspended. Renewals go every third of the TTL, or with a part below 1/2
// every two thirds of that part, so a healthy session is never Suspended.
// Not with WithSession.
func WithSuspendAfter(part float64) Option {
	return func(o *options) { o.SuspendAfter, o.SuspendSet = part, true }
}

// WithCancelOnSuspend makes election.Lead end fn's context already at
// Suspended, not only at Lost.
func WithCancelOnSuspend() Option { return func(o *options) { o.CancelOnSuspend = true } }

// WithMetrics makes the session and the election report to m.
func WithMetrics(m *metrics.Metrics) Option { return func(o *options) { o.Metrics = m } }

// WithLogger sends the session's logs to l. Without it k8sio logs nothing.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.Logger = l } }

// WithContext bounds construction (the server's version check), never the
// session's life.
func WithContext(ctx context.Context) Option { return func(o *options) { o.Context = ctx } }

// WithSession makes an election run on s instead of a session of its own;
// its Close then keeps s. Not with WithTTL, WithSuspendAfter or
// WithIdentity.
func WithSession(s *Session) Option { return func(o *options) { o.session, o.sessionSet = s, true } }

// WithIdentity sets the session's identity, the holderIdentity its Leases
// carry (as client-go's resourcelock.ResourceLockConfig.Identity): a pod's
// name, say. It must be unique among the candidates of an election, and
// valid UTF-8. The default is the host's name with a random suffix. Not
// with WithSession.
func WithIdentity(id string) Option { return func(o *options) { o.identity = id } }

func buildOptions(opts []Option) (options, error) {
	o := options{Config: driver.NewConfig()}
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
	if o.TTL%time.Second != 0 {
		return o, fmt.Errorf("TTL %v: must be whole seconds (leaseDurationSeconds): %w", o.TTL, ErrInvalidArgument)
	}
	if o.TTL/time.Second > math.MaxInt32 {
		return o, fmt.Errorf("TTL %v: more than %d s, the most leaseDurationSeconds (an int32) holds: %w", o.TTL, math.MaxInt32, ErrInvalidArgument)
	}
	if o.identity != "" && o.session != nil {
		return o, fmt.Errorf("WithIdentity and WithSession together: the session has its own: %w", ErrInvalidArgument)
	}
	if len(o.identity) > maxIdentity {
		return o, fmt.Errorf("identity of %d bytes, more than %d: %w", len(o.identity), maxIdentity, ErrInvalidArgument)
	}
	if !utf8.ValidString(o.identity) {
		// AnnotationTerm names the holder in JSON, which cannot hold it.
		return o, fmt.Errorf("identity %s is not valid UTF-8: %w", driver.QuoteName(o.identity), ErrInvalidArgument)
	}
	return o, nil
}
