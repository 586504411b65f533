package zkio

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// DefaultSessionTimeout is the session timeout asked for by a session made
// without WithTTL or WithSessionTimeout: driver.DefaultTTL, as on every
// backend. The server may grant a different one (between 2 and 20 of its
// ticks); the session always counts with the one granted.
const DefaultSessionTimeout = driver.DefaultTTL

// ErrInvalidArgument is wrapped by every error caused by bad input: no
// servers, a bad path, a bad timeout, clashing options, an oversized value.
// It wraps primitives.ErrInvalidArgument, so errors.Is matches either.
var ErrInvalidArgument = fmt.Errorf("zkio: %w", primitives.ErrInvalidArgument)

// maxSessionTimeout is the longest session timeout a session asks for: the
// ZooKeeper client sends it as int32 milliseconds (a longer one would
// overflow). The server grants at most its maxSessionTimeout anyway.
const maxSessionTimeout = math.MaxInt32 * time.Millisecond

// maxPath is the longest path a primitive accepts, in bytes.
const maxPath = 1024

// DefaultMaxDataSize is the largest value (a Campaign's or Proclaim's) a
// session made without WithMaxDataSize takes, in bytes: ZooKeeper's default
// jute.maxbuffer (1 MiB, the largest request a server accepts; over it the
// server drops the connection) less 4 KiB for the request's path and
// framing.
const DefaultMaxDataSize = 1<<20 - 4<<10

// maxMaxData bounds WithMaxDataSize: the client's send buffer is made that
// large.
const maxMaxData = 1 << 30

// Option configures NewSession, NewLock, NewRWLock, NewElection,
// NewSemaphore, NewBarrier and NewDoubleBarrier.
type Option func(*options)

type options struct {
	driver.Config      // TTL is the session timeout asked for
	timeoutSet    bool // the TTL came from WithSessionTimeout
	session       *Session
	sessionSet    bool
	maxData       int
	maxDataSet    bool
	value         string
	valueSet      bool
}

// WithValue makes a lock's holder and waiters carry value, as an election's
// leader carries its Campaign value: it is the data of the lock's znode, so
// that whoever reads the path (disco status, zkCli get) sees who holds and
// who waits, for example "host:pid". Curator's InterProcessMutex ignores a
// lock znode's data (it writes its own, the client's address by default),
// so the two exclude each other as before. A value larger than the
// session's limit (DefaultMaxDataSize, or WithMaxDataSize) is refused by
// NewLock with an error wrapping primitives.ErrInvalidArgument. Only
// NewLock takes it: the other constructors refuse it.
func WithValue(value string) Option {
	return func(o *options) { o.value, o.valueSet = value, true }
}

// WithTTL sets the session timeout to ask for (default DefaultSessionTimeout,
// 10s; whole milliseconds, at least 1s and at most 2^31-1 ms, about 596h,
// the client's limit): ZooKeeper's name for a lease's TTL.
// After the owner stops talking to ZooKeeper (it crashed, paused or was cut
// off) the server ends its session, and with it every hold, that long after
// it last heard from it. The server may grant less or more; the session
// counts with what it granted (Session.TTL). Not allowed together with
// WithSession, whose session already has its timeout.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.TTL, o.TTLSet, o.timeoutSet = d, true, false }
}

// WithSessionTimeout is WithTTL by its ZooKeeper name, and sets the same
// timeout; it takes whole milliseconds from 100ms (the server grants at
// least two of its ticks whatever is asked) to 2^31-1 ms.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.TTL, o.TTLSet, o.timeoutSet = d, false, true }
}

// WithSuspendAfter sets the part of the negotiated session timeout (0 < p <
// 1; default driver.DefaultSuspendAfter, a half) the session may go unheard
// from by the server before its holders get Suspended; a broken connection
// suspends them at once. The client pings an idle connection every third
// of the timeout; with a part below 1/2 the session also asks the server
// something every two thirds of that part, so a healthy session is never
// Suspended. Not allowed together with WithSession.
func WithSuspendAfter(p float64) Option {
	return func(o *options) { o.SuspendAfter, o.SuspendSet = p, true }
}

// WithMetrics reports the session's and the primitives' measures to m
// (see package metrics). Without it nothing is recorded. A primitive on a
// shared session (WithSession) without WithMetrics reports to the
// session's.
func WithMetrics(m *metrics.Metrics) Option {
	return func(o *options) { o.Metrics = m }
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
	return func(o *options) { o.Logger = l }
}

// WithContext bounds construction: a new session's first connection gives
// up when ctx ends (the constructor returns up to a second later: the
// ZooKeeper client's Close waits that long for a server that never
// answered). It never bounds the life of what is constructed. Without it
// construction gives up after 10 seconds.
func WithContext(ctx context.Context) Option {
	return func(o *options) { o.Context = ctx }
}

// WithCancelOnSuspend makes lock.Do and election.Lead end fn's context
// already at Suspended (the connection to ZooKeeper is gone or quiet and the
// session may end soon) rather than only at Lost. It configures primitives,
// not sessions.
func WithCancelOnSuspend() Option {
	return func(o *options) { o.CancelOnSuspend = true }
}

// WithMaxDataSize sets the largest value, in bytes, that primitives on the
// session take (a Campaign's or Proclaim's; default DefaultMaxDataSize): a
// larger one is refused at once with an error wrapping ErrInvalidArgument.
// For servers whose jute.maxbuffer is not the default 1 MiB: leave 4 KiB of
// it for the request's path and framing, since a server given a larger
// request drops the connection (and with it every primitive's on the
// session is Suspended). Not allowed together with WithSession, whose
// session already has its limit.
func WithMaxDataSize(n int) Option {
	return func(o *options) { o.maxData, o.maxDataSet = n, true }
}

func buildOptions(opts []Option) (options, error) {
	o := options{Config: driver.NewConfig(), maxData: DefaultMaxDataSize}
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
		if o.TTL < 100*time.Millisecond {
			return o, fmt.Errorf("session timeout %v: must be at least 100ms: %w", o.TTL, ErrInvalidArgument)
		}
		if o.session != nil {
			return o, fmt.Errorf("WithSessionTimeout and WithSession together: the session has its own timeout: %w", ErrInvalidArgument)
		}
	}
	if (o.timeoutSet || o.TTLSet) && o.TTL%time.Millisecond != 0 {
		return o, fmt.Errorf("session timeout %v: must be whole milliseconds: %w", o.TTL, ErrInvalidArgument)
	}
	if (o.timeoutSet || o.TTLSet) && o.TTL > maxSessionTimeout {
		return o, fmt.Errorf("session timeout %v: must be at most %v, the longest the ZooKeeper client can ask for: %w", o.TTL, maxSessionTimeout, ErrInvalidArgument)
	}
	if err := o.Check(o.session != nil, ErrInvalidArgument); err != nil {
		return o, err
	}
	if o.maxDataSet {
		if o.maxData <= 0 || o.maxData > maxMaxData {
			return o, fmt.Errorf("max data size %d: must be 1 to %d bytes: %w", o.maxData, maxMaxData, ErrInvalidArgument)
		}
		if o.session != nil {
			return o, fmt.Errorf("WithMaxDataSize and WithSession together: the session has its own limit: %w", ErrInvalidArgument)
		}
	}
	return o, nil
}

// cleanPath checks a primitive's path and returns it without a trailing
// "/" (accepted: "/a/" names the same znode as "/a"). It refuses what
// ZooKeeper refuses (control characters and the other runes it reserves,
// /zookeeper and below) and the names disco's own znodes take: a segment
// ending in EpochSuffix (a read/write lock's epoch znode) or in the marker
// and sequence of a queue member ("lock-", "latch-", "__READ__" or
// "__WRIT__" and digits), which the primitive on the parent path would
// take as one of its own.
func cleanPath(path string) (string, error) {
	show := quote.Name(path)
	switch {
	case path == "":
		return "", fmt.Errorf("empty path: %w", ErrInvalidArgument)
	case path == "/":
		return "", fmt.Errorf(`path "/": the root holds every other path: %w`, ErrInvalidArgument)
	case len(path) > maxPath:
		return "", fmt.Errorf("path %s: more than %d bytes: %w", show, maxPath, ErrInvalidArgument)
	case path[0] != '/':
		return "", fmt.Errorf("path %s: must start with /: %w", show, ErrInvalidArgument)
	}
	if !utf8.ValidString(path) {
		return "", fmt.Errorf("path %s: not UTF-8: %w", show, ErrInvalidArgument)
	}
	if r := strings.IndexFunc(path, reservedRune); r >= 0 {
		return "", fmt.Errorf("path %s: character %U at byte %d, which ZooKeeper refuses: %w",
			show, []rune(path[r:])[0], r, ErrInvalidArgument)
	}
	p := strings.TrimSuffix(path, "/")
	segs := strings.Split(p[1:], "/")
	if segs[0] == "zookeeper" {
		return "", fmt.Errorf("path %s: /zookeeper is ZooKeeper's own: %w", show, ErrInvalidArgument)
	}
	for _, seg := range segs {
		switch {
		case seg == "":
			return "", fmt.Errorf("path %s: empty segment: %w", show, ErrInvalidArgument)
		case seg == "." || seg == "..":
			return "", fmt.Errorf("path %s: segment %q: %w", show, seg, ErrInvalidArgument)
		case strings.HasSuffix(seg, EpochSuffix):
			return "", fmt.Errorf("path %s: segment %q ends in %q, the name of a read/write lock's epoch znode: %w",
				show, seg, EpochSuffix, ErrInvalidArgument)
		case isMember(seg, lockMarker, latchMarker, readMarker, writeMarker):
			return "", fmt.Errorf("path %s: segment %q is named as a lock, election or read/write lock znode: %w",
				show, seg, ErrInvalidArgument)
		}
	}
	return p, nil
}

// reservedRune reports whether ZooKeeper refuses r in a path (NUL, control
// characters, U+F000 to U+F8FF and U+FFF0 to U+FFFE, as its PathUtils does).
func reservedRune(r rune) bool {
	return r <= '\u001f' || (r >= '\u007f' && r <= '\u009f') ||
		(r >= '\uf000' && r <= '\uf8ff') || (r >= '\ufff0' && r < '\uffff')
}
