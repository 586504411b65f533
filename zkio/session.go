package zkio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/internal/reach"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// Session is one ZooKeeper session: one client connection (re-established
// to any server of the ensemble while the session lives) and one event loop
// that owns the session's state and every primitive's on it.
//
// A Session ends when ZooKeeper expires it, when it has not been heard from
// for its whole timeout (counted from the send time of the last request the
// server answered, so never after the server's own expiry), or on Close.
type Session struct {
	conn *zk.Conn
	id   int64 // the session's id, kept: the client forgets it at an expiry
	// requests is conn, for the requests whose failures a test may stage:
	// queue and double-barrier creates, their lookups, an acquisition's
	// stat of its own znode, a double barrier's listings and withdrawals,
	// deletes by deleteNode, a barrier's looks.
	requests requestConn
	zkev     <-chan zk.Event
	wire     *wire
	log      *zap.Logger
	metrics  *metrics.Metrics
	asked    time.Duration
	part     float64       // WithSuspendAfter's part of the timeout
	granted  atomic.Int64  // negotiated timeout, ns; 0 until known
	learnt   chan struct{} // closed once granted is known
	maxData  int           // the largest value primitives take

	mb            *actor.Mailbox[func()]
	quit          chan struct{} // closed when the loop is told to stop
	stopped       chan struct{} // closed when the loop has returned
	done          chan struct{}
	err           atomic.Pointer[error]
	helpers       sync.WaitGroup
	helperMu      sync.Mutex
	helpersClosed bool // no new helper starts

	closeOnce sync.Once
	// closeErr is set by closeConn when no server answered the close:
	// the session, and its ephemeral znodes, live on at the server until
	// its timeout. Read once the helpers are done.
	closeErr error

	// leaderAsked numbers the reads of who leads the loop asks for, on
	// every follow: a read started after an ask carries at least its
	// number.
	leaderAsked atomic.Uint64

	// Loop only.
	services map[*service]struct{}
	follows  map[string]*leaderFollow // by election path, while someone listens (or a watch is left)
	clock    driver.Clock
	ended    bool
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
	if o.CancelOnSuspend {
		return nil, fmt.Errorf("WithCancelOnSuspend configures primitives, not sessions: %w", ErrInvalidArgument)
	}
	if o.valueSet {
		return nil, fmt.Errorf("WithValue is for locks, not sessions: %w", ErrInvalidArgument)
	}
	return newSession(servers, o)
}

// checkServers refuses an empty list of servers or an empty address.
func checkServers(servers []string) error {
	if len(servers) == 0 {
		return fmt.Errorf("no ZooKeeper servers: %w", ErrInvalidArgument)
	}
	for _, s := range servers {
		if s == "" {
			return fmt.Errorf("empty server address: %w", ErrInvalidArgument)
		}
	}
	return nil
}

func newSession(servers []string, o options) (*Session, error) {
	if err := checkServers(servers); err != nil {
		return nil, err
	}
	s := &Session{
		log:      o.Logger,
		metrics:  o.Metrics,
		asked:    o.TTL,
		part:     o.SuspendAfter,
		learnt:   make(chan struct{}),
		maxData:  o.maxData,
		mb:       actor.NewMailbox[func()](),
		quit:     make(chan struct{}),
		stopped:  make(chan struct{}),
		done:     make(chan struct{}),
		services: make(map[*service]struct{}),
		follows:  make(map[string]*leaderFollow),
	}
	s.wire = newWire(s, s.quit)
	sendBuffer := zk.WithLogInfo(true) // the default: the client logs what zkLogger learns from
	if buf := o.maxData + sendSlack; buf > clientSendBuffer {
		sendBuffer = zk.WithMaxConnBufferSize(buf)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(o.Context, connectTimeout)
	defer cancel()
	conn, events, err := zk.Connect(servers, o.TTL, zk.WithDialer(s.wire.dial),
		zk.WithLogger(zkLogger{s}), sendBuffer)
	if err != nil {
		return nil, fmt.Errorf("zkio: connect: %w", reach.Failed(ctx, "ZooKeeper", servers, began, "", err))
	}
	s.conn, s.requests, s.zkev = conn, conn, events
	// The session is there once the client says so and the timeout it
	// was granted is known (the client logs it just after).
	for connected, learnt := false, s.learnt; !connected || learnt != nil; {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil, errors.New("zkio: connection closed before a session was established")
			}
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				connected = true
			}
		case <-learnt:
			learnt = nil
		case <-ctx.Done():
			err := reach.Failed(ctx, "ZooKeeper", servers, began, "", ctx.Err())
			// No goroutine outlives the constructor.
			s.closeConn()
			return nil, fmt.Errorf("zkio: no session: %w", err)
		}
	}
	s.id = conn.SessionID()
	// The lease was granted no earlier than the connect request was sent.
	sent, _ := s.wire.lastHeard()
	ttl := s.Timeout()
	s.clock = driver.NewClock(sent, ttl, driver.SuspendPart(ttl, s.part))
	go s.run()
	if every := s.clock.RenewEvery(); every < ttl/3 {
		s.helper(func() { s.renew(every) })
	}
	return s, nil
}

// renew asks the server something every interval until the session ends,
// for a session whose WithSuspendAfter part is below 1/2: the client pings
// an idle connection only every third of the timeout, and the answers are
// what confirm the session (see wire), so that a healthy session is never
// Suspended (driver.Clock.RenewEvery). Helper.
func (s *Session) renew(every time.Duration) {
	for s.sleep(every) {
		_, _, _ = s.conn.Exists("/")
	}
}

// The ZooKeeper client's send buffer holds one request: by default 1.5 MiB,
// more for a session that takes larger values, with room for the path and
// framing of the request that carries one.
const (
	clientSendBuffer = 1536 << 10
	sendSlack        = 64 << 10
)

// connectTimeout bounds a new session's first connection without
// WithContext.
const connectTimeout = 10 * time.Second

// checkValue refuses a value larger than the session takes.
func (s *Session) checkValue(what string, value string) error {
	if len(value) > s.maxData {
		return fmt.Errorf("zkio: %s value of %d bytes, more than the %d bytes a znode takes here (WithMaxDataSize): %w",
			what, len(value), s.maxData, ErrInvalidArgument)
	}
	return nil
}

// SessionID returns ZooKeeper's id of the session, the ephemeralOwner of
// every znode its primitives create; after the session ended too.
func (s *Session) SessionID() int64 { return s.id }

// LeaseID is SessionID, by the name every backend's session has: the
// LeaseID of every grant on the session.
func (s *Session) LeaseID() int64 { return s.SessionID() }

// Timeout returns the session timeout the server granted (or, before it was
// learnt, the one asked for).
func (s *Session) Timeout() time.Duration {
	if g := s.granted.Load(); g > 0 {
		return time.Duration(g)
	}
	return s.asked
}

// TTL is Timeout, by the name every backend's session has: the session
// timeout the server granted, the TTL of every grant on the session.
func (s *Session) TTL() time.Duration { return s.Timeout() }

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
// primitive still on it with ErrClosed. If no server answers within a
// second, Close returns an error wrapping context.DeadlineExceeded: the
// session ends all the same here, and at the server, with its znodes,
// within its timeout. A second Close returns an error wrapping
// primitives.ErrClosed; Close after loss returns the loss.
func (s *Session) Close() error {
	err := fmt.Errorf("zkio: session closed: %w", primitives.ErrClosed)
	first := false
	s.closeOnce.Do(func() {
		first = true
		if !s.mb.Post(func() { s.end(err, "") }) {
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
	return s.closeErr
}

// closeOwn is Close for a primitive's own session: its error is only that
// of a close no server answered (the primitive reports a loss itself).
func (s *Session) closeOwn() error {
	if err := s.Close(); errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// post hands f to the loop; false if the loop has stopped.
func (s *Session) post(f func()) bool { return s.mb.Post(f) }

// helper runs f on a goroutine the session waits for at its end; false
// (and f never runs) if the session has ended.
func (s *Session) helper(f func()) bool {
	s.helperMu.Lock()
	defer s.helperMu.Unlock()
	if s.helpersClosed {
		return false
	}
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		f()
	}()
	return true
}

// countedHelper is helper, with f counted in c while it runs (see
// inflight.Counter): a primitive's Close waits for it.
func (s *Session) countedHelper(c *inflight.Counter, f func()) bool {
	c.Add()
	if !s.helper(func() {
		defer c.Done()
		f()
	}) {
		c.Done()
		return false
	}
	return true
}

// run is the session's event loop. Its entry points are the functions
// posted to its mailbox (by callers and helpers), the client's session
// events, the wire's word that the server answered, and a timer set to the
// clock's next point (suspension or deadline). A test may freeze it
// (testhook.PauseSession); it then checks the clock at once on waking, as
// a process waking from a long pause would.
func (s *Session) run() {
	defer close(s.stopped)
	wake := time.NewTimer(time.Until(s.clock.Next()))
	defer wake.Stop()
	var batch []func()
	for !s.ended {
		select {
		case <-s.mb.Ready():
			testhook.Wait(s, s.quit)
			batch = s.mb.Drain(batch[:0])
			s.metrics.Drained(len(batch))
			for _, f := range batch {
				if !s.ended {
					f()
				}
			}
		case ev, ok := <-s.zkev:
			testhook.Wait(s, s.quit)
			if !ok {
				s.end(fmt.Errorf("zkio: session %#x: connection closed: %w", s.id, primitives.ErrLost),
					metrics.CauseLeaseRevoked)
				break
			}
			s.sessionEvent(ev)
		case <-s.wire.heardCh:
			testhook.Wait(s, s.quit)
		case <-wake.C:
			testhook.Wait(s, s.quit)
		}
		s.check()
		if !s.ended {
			wake.Reset(time.Until(s.clock.Next()))
		}
	}
}

// sessionEvent follows the client's session state. Loop only.
func (s *Session) sessionEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	switch ev.State {
	case zk.StateExpired:
		s.end(fmt.Errorf("zkio: session %#x expired: %w", s.id, primitives.ErrLost),
			metrics.CauseLeaseRevoked)
	case zk.StateDisconnected, zk.StateConnecting:
		// The connection broke when the wire saw it fail; a request sent
		// after that and answered (on a new connection) already made up
		// for it.
		now := time.Now()
		at := s.wire.lastBroken()
		if at.IsZero() || at.After(now) {
			at = now
		}
		if sent, _ := s.wire.lastHeard(); !sent.After(at) {
			s.act(s.clock.Broken(at))
		}
	}
}

// check tells the clock of the latest answer the server gave, if it is
// new, and of the time: the session is lost at its deadline, its holders
// are suspended and resumed as it says. Loop only.
func (s *Session) check() {
	if s.ended {
		return
	}
	now := time.Now()
	if sent, replied := s.wire.lastHeard(); sent.After(s.clock.LastSent()) {
		margin := s.clock.Deadline().Sub(now)
		change := s.clock.Renewed(sent, now, s.Timeout())
		if change != driver.Expire {
			s.metrics.Renewed(replied.Sub(sent), margin)
		}
		s.act(change)
	}
	s.act(s.clock.Tick(now))
}

// act carries out what the clock reported. Loop only.
func (s *Session) act(c driver.Change) {
	if s.ended {
		return
	}
	switch c {
	case driver.Suspend:
		s.metrics.Suspended()
		for svc := range s.services {
			svc.Suspend(s.clock.Deadline())
		}
	case driver.Resume:
		for svc := range s.services {
			svc.Resume()
		}
	case driver.Expire:
		sent := s.clock.LastSent()
		s.end(fmt.Errorf("zkio: session %#x not heard from since %s, its timeout %v has passed: %w",
			s.id, sent.Format(time.RFC3339Nano), s.Timeout(), primitives.ErrLost),
			metrics.CauseLeaseExpired)
	}
}

// join adds svc to the session, suspended if the session is. Loop only.
func (s *Session) join(svc *service) {
	s.services[svc] = struct{}{}
	if s.clock.Suspended() {
		svc.Suspend(s.clock.Deadline())
	}
}

// end ends the session and every primitive on it with err; cause is the
// metrics.Cause of a loss ("" for Close). Loop only.
func (s *Session) end(err error, cause string) {
	if s.ended {
		return
	}
	s.ended = true
	s.err.Store(&err)
	for svc := range s.services {
		svc.end(err, cause)
	}
	clear(s.services)
	clear(s.follows)
	s.mb.Close()
	close(s.quit)
	close(s.done)
	// Closing the connection ends the session at the server (if it still
	// lives), deleting its ephemeral znodes; Session.Close waits for it.
	s.helper(s.closeConn)
	s.helperMu.Lock()
	s.helpersClosed = true
	s.helperMu.Unlock()
}

// closeConn closes the ZooKeeper client and returns once its goroutines
// have ended. The client's Close waits up to a second for the server's
// answer to its close request (none comes to a connection that never got
// a session, or that no server answers), and its goroutines would then
// run on until a read timed out, two thirds of the session timeout later:
// so the wire's connections are closed under it, and the client's events
// close once it has returned.
func (s *Session) closeConn() {
	asked := time.Now()
	s.conn.Close()
	// The close request is sent after asked: an answer to it says so.
	if sent, _ := s.wire.lastHeard(); sent.Before(asked) {
		s.closeErr = fmt.Errorf("zkio: close session %#x: ZooKeeper did not answer; its ephemeral znodes go when it expires the session, within %v: %w",
			s.id, s.Timeout(), context.DeadlineExceeded)
	}
	s.wire.shutDown()
	for range s.zkev {
	}
}

// zkLogger routes the ZooKeeper client's logs to the session's logger, and
// learns the session timeout the server granted from the client's log of
// it (the client does not export it otherwise).
type zkLogger struct{ s *Session }

func (l zkLogger) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "authenticated: id=%d, timeout=%d") && len(args) == 2 {
		if ms, ok := args[1].(int32); ok && ms > 0 {
			if l.s.granted.Swap(int64(time.Duration(ms)*time.Millisecond)) == 0 {
				close(l.s.learnt)
			}
		}
	}
	l.s.log.Debug(fmt.Sprintf(format, args...), zap.String("component", "zookeeper client"))
}
