package zkio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
)

// DefaultSessionTimeout is the session timeout asked for by a session made
// without WithSessionTimeout. The server may grant a different one (between
// 2 and 20 of its ticks); the session always counts with the one granted.
const DefaultSessionTimeout = 30 * time.Second

// ErrInvalidArgument is wrapped by every constructor error caused by bad
// input: no servers, a bad path, a bad timeout, clashing options.
var ErrInvalidArgument = errors.New("zkio: invalid argument")

// maxPath is the longest path a primitive accepts, in bytes.
const maxPath = 1024

// Option configures NewSession, NewLock and NewElection.
type Option func(*options)

type options struct {
	timeout         time.Duration
	timeoutSet      bool
	session         *Session
	sessionSet      bool
	log             *zap.Logger
	ctx             context.Context
	cancelOnSuspend bool
}

// WithSessionTimeout sets the ZooKeeper session timeout to ask for (whole
// milliseconds, at least 100ms). After the owner stops talking to
// ZooKeeper (it crashed, paused or was cut off) the server ends its session,
// and with it every hold, that long after it last heard from it. Not allowed
// together with WithSession, whose session already has its timeout.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.timeout, o.timeoutSet = d, true }
}

// WithSession makes a primitive run on an existing session (its connection
// and its event loop) instead of starting its own. Close of the primitive
// then releases what the primitive holds but keeps the session; the caller
// closes it.
func WithSession(s *Session) Option {
	return func(o *options) { o.session, o.sessionSet = s, true }
}

// WithLogger sends the session's logs, and the ZooKeeper client's, to l.
// Without it disco logs nothing.
func WithLogger(l *zap.Logger) Option {
	return func(o *options) { o.log = l }
}

// WithContext bounds construction: a new session's first connection gives
// up when ctx ends. It never bounds the life of what is constructed.
// Without it construction gives up after 10 seconds.
func WithContext(ctx context.Context) Option {
	return func(o *options) { o.ctx = ctx }
}

// WithCancelOnSuspend makes lock.Do and election.Lead end fn's context
// already at Suspended (the connection to ZooKeeper is gone or quiet and the
// session may end soon) rather than only at Lost. It configures primitives,
// not sessions.
func WithCancelOnSuspend() Option {
	return func(o *options) { o.cancelOnSuspend = true }
}

func buildOptions(opts []Option) (options, error) {
	o := options{timeout: DefaultSessionTimeout}
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("nil Option: %w", ErrInvalidArgument)
		}
		opt(&o)
	}
	if o.sessionSet && o.session == nil {
		return o, fmt.Errorf("WithSession(nil): %w", ErrInvalidArgument)
	}
	if o.timeoutSet {
		if o.timeout < 100*time.Millisecond || o.timeout%time.Millisecond != 0 {
			return o, fmt.Errorf("session timeout %v: must be whole milliseconds, at least 100ms: %w", o.timeout, ErrInvalidArgument)
		}
		if o.session != nil {
			return o, fmt.Errorf("WithSessionTimeout and WithSession together: the session has its own timeout: %w", ErrInvalidArgument)
		}
	}
	if o.ctx == nil {
		o.ctx = context.Background()
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	return o, nil
}

// cleanPath checks a primitive's path and returns it without a trailing
// "/" (accepted: "/a/" names the same znode as "/a").
func cleanPath(path string) (string, error) {
	show := path
	if len(show) > 64 {
		show = show[:64] + "..."
	}
	switch {
	case path == "":
		return "", fmt.Errorf("empty path: %w", ErrInvalidArgument)
	case path == "/":
		return "", fmt.Errorf(`path "/": the root holds every other path: %w`, ErrInvalidArgument)
	case len(path) > maxPath:
		return "", fmt.Errorf("path %q of %d bytes, more than %d: %w", show, len(path), maxPath, ErrInvalidArgument)
	case path[0] != '/':
		return "", fmt.Errorf("path %q: must start with /: %w", show, ErrInvalidArgument)
	}
	p := strings.TrimSuffix(path, "/")
	for _, seg := range strings.Split(p[1:], "/") {
		switch {
		case seg == "":
			return "", fmt.Errorf("path %q: empty segment: %w", show, ErrInvalidArgument)
		case seg == "." || seg == "..":
			return "", fmt.Errorf("path %q: segment %q: %w", show, seg, ErrInvalidArgument)
		case strings.ContainsRune(seg, 0):
			return "", fmt.Errorf("path %q: NUL byte: %w", show, ErrInvalidArgument)
		}
	}
	return p, nil
}
