package supervise

import (
	"fmt"
	"time"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
)

// Defaults of the backoff between attempts.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	DefaultJitter     = 0.2
)

// Option configures Run.
type Option func(*config)

type config struct {
	min, max time.Duration
	jitter   float64
	onEvent  func(primitives.Event)
	onRetry  func(attempt int, err error)
}

// WithBackoff sets the delay before the first retry (min) and the most it
// grows to (max); it doubles with each consecutive failed attempt.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.min, c.max = min, max }
}

// WithJitter sets the part of each delay (0 to 1) drawn at random: a delay d
// becomes a uniform choice in [d*(1-f), d], so it never exceeds max.
func WithJitter(f float64) Option {
	return func(c *config) { c.jitter = f }
}

// OnEvent sets a function called with every event of every service built,
// in order.
func OnEvent(f func(primitives.Event)) Option {
	return func(c *config) { c.onEvent = f }
}

// OnRetry sets a function called before each wait, with the number of
// consecutive failed attempts and the error that ended the last one.
func OnRetry(f func(attempt int, err error)) Option {
	return func(c *config) { c.onRetry = f }
}

func build(helper string, opts []Option) (config, error) {
	c := config{min: DefaultMinBackoff, max: DefaultMaxBackoff, jitter: DefaultJitter}
	for _, opt := range opts {
		if opt == nil {
			return c, fmt.Errorf("%s: nil option: %w", helper, primitives.ErrInvalidArgument)
		}
		opt(&c)
	}
	switch {
	case c.min <= 0 || c.max < c.min:
		return c, fmt.Errorf("%s: backoff from %v to %v: want 0 < min <= max: %w", helper, c.min, c.max, primitives.ErrInvalidArgument)
	case !(c.jitter >= 0 && c.jitter <= 1):
		return c, fmt.Errorf("%s: jitter %v: want 0 to 1: %w", helper, c.jitter, primitives.ErrInvalidArgument)
	}
	return c, nil
}

// delay is the wait after the given number of consecutive failed attempts
// (at least 1): min doubled attempt-1 times, at most max, less a random part
// of at most jitter of it.
func (c config) delay(attempt int) time.Duration {
	d := c.min
	for i := 1; i < attempt && d < c.max; i++ {
		if d > c.max/2 {
			d = c.max
			break
		}
		d *= 2
	}
	return ctxtime.Jitter(d, c.jitter)
}
