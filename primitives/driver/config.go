package driver

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
)

// DefaultTTL is the lease TTL (on ZooKeeper, the session timeout asked for)
// of a session made without WithTTL, on every backend and in the command.
const DefaultTTL = 10 * time.Second

// DefaultSuspendAfter is the part of the TTL a session may go without an
// acknowledged renewal before its holders get Suspended, without
// WithSuspendAfter. Renewals go every third of the TTL, so a healthy
// session is confirmed well before.
const DefaultSuspendAfter = 0.5

// A grant or a waiting key is watched for its deletion by someone else
// only once it has lived a while: a hold once it is HoldWatchAfter old (at
// most a quarter of the TTL), a wait once it is WaitWatchAfter(ttl) old.
// Short holds and waits, the common ones under contention, then cost their
// store no watch, and their releases send their own session no event; a
// deletion is still noticed within those delays and a round trip, well
// within the half TTL the conformance laws allow.
const HoldWatchAfter = 100 * time.Millisecond

// WaitWatchAfter is how long a waiting key lives unwatched on a session of
// the given TTL: a quarter of it.
func WaitWatchAfter(ttl time.Duration) time.Duration { return ttl / 4 }

// Config is the option set every backend offers, with one meaning and one
// default. A backend's options embed it, and its option functions set it:
//
//	WithTTL(d)             TTL (the lease's time to live; ZooKeeper: the session timeout asked for)
//	WithSuspendAfter(p)    SuspendAfter (a part of the TTL, 0 < p < 1)
//	WithCancelOnSuspend()  CancelOnSuspend
//	WithMetrics(m)         Metrics
//	WithLogger(l)          Logger
//	WithContext(ctx)       Context (bounds construction only)
//
// WithSession, whose session type is the backend's, is each backend's own;
// Check is told whether it was given.
type Config struct {
	// MinTTL is the shortest TTL Check accepts: 1 s unless the backend's
	// store allows less (Redis: 100 ms).
	MinTTL          time.Duration
	TTL             time.Duration
	TTLSet          bool
	SuspendAfter    float64
	SuspendSet      bool
	CancelOnSuspend bool
	Metrics         *metrics.Metrics
	Logger          *zap.Logger
	Context         context.Context
}

// NewConfig returns the defaults.
func NewConfig() Config {
	return Config{MinTTL: time.Second, TTL: DefaultTTL, SuspendAfter: DefaultSuspendAfter}
}

// Check validates c for a constructor given a session (WithSession) or not,
// and fills in what was left unset (a no-op logger, context.Background()).
// Its errors wrap invalid, the backend's sentinel for bad input, which must
// wrap primitives.ErrInvalidArgument (nil: primitives.ErrInvalidArgument
// itself). A backend with a finer rule for the TTL (etcd's whole seconds)
// checks it too.
func (c *Config) Check(withSession bool, invalid error) error {
	if invalid == nil {
		invalid = primitives.ErrInvalidArgument
	}
	if c.MinTTL <= 0 {
		c.MinTTL = time.Second
	}
	if c.TTLSet {
		if c.TTL < c.MinTTL {
			return fmt.Errorf("TTL %v: must be at least %v: %w", c.TTL, c.MinTTL, invalid)
		}
		if withSession {
			return fmt.Errorf("WithTTL and WithSession together: the session has its own TTL: %w", invalid)
		}
	}
	if !(c.SuspendAfter > 0 && c.SuspendAfter < 1) {
		return fmt.Errorf("WithSuspendAfter(%v): must be between 0 and 1: %w", c.SuspendAfter, invalid)
	}
	if c.SuspendSet && withSession {
		return fmt.Errorf("WithSuspendAfter and WithSession together: the session has its own: %w", invalid)
	}
	if c.Context == nil {
		c.Context = context.Background()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}
