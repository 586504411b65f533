package zkio

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/primitives"
)

// Session is one ZooKeeper session: one client connection (re-established
// to any server of the ensemble while the session lives) and one event loop
// that owns the session's state and every primitive's on it.
//
// A Session ends when ZooKeeper expires it, when it has not been heard from
// for its whole timeout (counted from the send time of the last request the
// server answered, so never after the server's own expiry), or on Close.
type Session struct {
	conn    *zk.Conn
	zkev    <-chan zk.Event
	wire    *wire
	log     *zap.Logger
	asked   time.Duration
	granted atomic.Int64 // negotiated timeout, ns; 0 until known
	maxData int          // the largest value primitives take

	mb            *actor.Mailbox[func()]
	quit          chan struct{} // closed when the loop is told to stop
	stopped       chan struct{} // closed when the loop has returned
	done          chan struct{}
	err           atomic.Pointer[error]
	helpers       sync.WaitGroup
	helperMu      sync.Mutex
	helpersClosed bool // no new helper starts

	closeOnce sync.Once

	// Loop only.
	services  map[*service]struct{}
	connected bool
	suspended bool
	ended     bool
	wake      time.Time       // when the loop checks the session next
	pausing   <-chan struct{} // test hook: freeze the loop until closed
}

// NewSession connects to the ZooKeeper servers ("host:port") and waits for
// a session. The Session owns its connection; Close ends both.
func NewSession(servers []string, opts ...Option) (*Session, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.session != nil {
		return nil, fmt.Errorf("WithSession given to NewSession: %w", ErrInvalidArgument)
	}
	if o.cancelOnSuspend {
		return nil, fmt.Errorf("WithCancelOnSuspend configures primitives, not sessions: %w", ErrInvalidArgument)
	}
	return newSession(servers, o)
}

func newSession(servers []string, o options) (*Session, error) {
	if len(servers) == 0 {
		return nil, fmt.Errorf("no ZooKeeper servers: %w", ErrInvalidArgument)
	}
	for _, s := range servers {
		if s == "" {
			return nil, fmt.Errorf("empty server address: %w", ErrInvalidArgument)
		}
	}
	s := &Session{
		wire:     newWire(),
		log:      o.log,
		asked:    o.timeout,
		maxData:  o.maxData,
		mb:       actor.NewMailbox[func()](),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		done:     make(chan struct{}),
		services: make(map[*service]struct{}),
	}
	sendBuffer := zk.WithLogInfo(true) // the default: the client logs what zkLogger learns from
	if buf := o.maxData + sendSlack; buf > clientSendBuffer {
		sendBuffer = zk.WithMaxConnBufferSize(buf)
	}
	conn, events, err := zk.Connect(servers, o.timeout, zk.WithDialer(s.wire.dial),
		zk.WithLogger(zkLogger{s}), sendBuffer)
	if err != nil {
		return nil, fmt.Errorf("zkio: connect: %w", err)
	}
	s.conn, s.zkev = conn, events
	ctx := o.ctx
	wait := time.NewTimer(10 * time.Second)
	defer wait.Stop()
	for connected := false; !connected; {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("zkio: connection closed before a session was established")
			}
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				connected = true
			}
		case <-ctx.Done():
			conn.Close()
			return nil, fmt.Errorf("zkio: no session: %w", ctx.Err())
		case <-wait.C:
			conn.Close()
			return nil, fmt.Errorf("zkio: no session with %v within 10s", servers)
		}
	}
	s.connected = true
	go s.run()
	return s, nil
}

// The ZooKeeper client's send buffer holds one request: by default 1.5 MiB,
// more for a session that takes larger values, with room for the path and
// framing of the request that carries one.
const (
	clientSendBuffer = 1536 << 10
	sendSlack        = 64 << 10
)

// checkValue refuses a value larger than the session takes.
func (s *Session) checkValue(what string, value string) error {
	if len(value) > s.maxData {
		return fmt.Errorf("zkio: %s value of %d bytes, more than the %d bytes a znode takes here (WithMaxDataSize): %w",
			what, len(value), s.maxData, ErrInvalidArgument)
	}
	return nil
}

// SessionID returns ZooKeeper's id of the session, the ephemeralOwner of
// every znode its primitives create.
func (s *Session) SessionID() int64 { return s.conn.SessionID() }

// Timeout returns the session timeout the server granted (or, before it was
// learnt, the one asked for).
func (s *Session) Timeout() time.Duration {
	if g := s.granted.Load(); g > 0 {
		return time.Duration(g)
	}
	return s.asked
}

// Done is closed when the session has ended: expired, lost or closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; then it wraps primitives.ErrLost or
// primitives.ErrClosed.
func (s *Session) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Close ends the session at the server, so that its ephemeral znodes (every
// hold and candidacy on it) are gone when Close returns, and ends every
// primitive still on it with ErrClosed. A second Close returns an error
// wrapping primitives.ErrClosed; Close after loss returns the loss.
func (s *Session) Close() error {
	err := fmt.Errorf("zkio: session closed: %w", primitives.ErrClosed)
	first := false
	s.closeOnce.Do(func() {
		first = true
		if !s.mb.Post(func() { s.end(err) }) {
			return
		}
		<-s.stopped
	})
	<-s.stopped
	s.helpers.Wait()
	if !first {
		return s.Err()
	}
	if e := s.Err(); !errors.Is(e, primitives.ErrClosed) {
		return e
	}
	return nil
}

// post hands f to the loop; false if the loop has stopped.
func (s *Session) post(f func()) bool { return s.mb.Post(f) }

// helper runs f on a goroutine the session waits for at its end.
func (s *Session) helper(f func()) {
	s.helperMu.Lock()
	defer s.helperMu.Unlock()
	if s.helpersClosed {
		return
	}
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		f()
	}()
}

// run is the session's event loop. Its entry points are the functions
// posted to its mailbox (by callers and helpers), the client's session
// events, and a timer that wakes it when the session must next be checked
// (see check): at its deadline, at the point it counts as quiet, and at
// least every tenth of its timeout.
func (s *Session) run() {
	defer close(s.stopped)
	wake := time.NewTimer(0)
	defer wake.Stop()
	var armed time.Time
	var batch []func()
	for !s.ended {
		if !s.wake.Equal(armed) {
			armed = s.wake
			wake.Reset(time.Until(armed))
		}
		select {
		case <-s.mb.Ready():
			batch = s.mb.Drain(batch[:0])
			for _, f := range batch {
				if !s.ended {
					f()
				}
				s.frozen()
			}
		case ev, ok := <-s.zkev:
			if !ok {
				s.end(fmt.Errorf("zkio: session %#x: connection closed: %w", s.conn.SessionID(), primitives.ErrLost))
				break
			}
			s.sessionEvent(ev)
		case <-wake.C:
			armed = time.Time{}
			s.check()
		}
	}
}

// frozen blocks while a test pauses the loop, then checks the session at
// once, as a process waking from a long pause would. Loop only.
func (s *Session) frozen() {
	if s.pausing == nil {
		return
	}
	<-s.pausing
	s.pausing = nil
	s.check()
}

// sessionEvent follows the client's session state. Loop only.
func (s *Session) sessionEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateExpired:
		s.end(fmt.Errorf("zkio: session %#x expired: %w", s.conn.SessionID(), primitives.ErrLost))
		return
	case zk.StateHasSession:
		s.connected = true
	case zk.StateDisconnected, zk.StateConnecting:
		s.connected = false
	}
	s.check()
}

// check ends the session once the server may have expired it, and
// suspends or resumes its holders; it sets when the loop checks next: at
// the deadline, at the point the session counts as quiet (if not
// suspended), and no later than a tenth of its timeout from now (to see a
// quiet session heard from again). Loop only.
func (s *Session) check() {
	if s.ended {
		return
	}
	timeout := s.Timeout()
	heard := s.wire.lastHeard()
	deadline := heard.Add(timeout)
	now := time.Now()
	if !now.Before(deadline) {
		s.end(fmt.Errorf("zkio: session %#x not heard from since %s, its timeout %v has passed: %w",
			s.conn.SessionID(), heard.Format(time.RFC3339Nano), timeout, primitives.ErrLost))
		return
	}
	quietAt := heard.Add(timeout / 2)
	quiet := now.After(quietAt)
	switch {
	case !s.suspended && (!s.connected || quiet):
		s.suspended = true
		for svc := range s.services {
			svc.suspend(deadline)
		}
	case s.suspended && s.connected && !quiet:
		s.suspended = false
		for svc := range s.services {
			svc.resume()
		}
	}
	s.wake = now.Add(max(timeout/10, 10*time.Millisecond))
	if deadline.Before(s.wake) {
		s.wake = deadline
	}
	if !s.suspended && quietAt.After(now) && quietAt.Before(s.wake) {
		s.wake = quietAt
	}
}

// end ends the session and every primitive on it with err. Loop only.
func (s *Session) end(err error) {
	if s.ended {
		return
	}
	s.ended = true
	s.err.Store(&err)
	for svc := range s.services {
		svc.end(err)
	}
	clear(s.services)
	s.mb.Close()
	close(s.quit)
	close(s.done)
	// Closing the connection ends the session at the server (if it still
	// lives), deleting its ephemeral znodes; Session.Close waits for it.
	s.helper(s.conn.Close)
	s.helperMu.Lock()
	s.helpersClosed = true
	s.helperMu.Unlock()
}

// zkLogger routes the ZooKeeper client's logs to the session's logger, and
// learns the session timeout the server granted from the client's log of
// it (the client does not export it otherwise).
type zkLogger struct{ s *Session }

func (l zkLogger) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "authenticated: id=%d, timeout=%d") && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			l.s.granted.Store(int64(time.Duration(ms) * time.Millisecond))
		}
	}
	l.s.log.Debug(fmt.Sprintf(format, args...), zap.String("component", "zookeeper client"))
}
