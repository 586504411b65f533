package k8sio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/nilness"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// opTimeout bounds each request a session makes, and all the requests of
// a Close together.
const opTimeout = 5 * time.Second

// leaveGrace is how long a Campaign whose context ended waits for its
// withdrawal (see service.Campaign): with the API server answering, the
// caller returns once nothing of its Campaign is left; otherwise the
// withdrawal goes on without it, and Close waits for it.
const leaveGrace = 500 * time.Millisecond

// Session is one identity on the API server: the holderIdentity of the
// Leases it holds, one event loop that renews them, and the elections that
// run on it. Kubernetes keeps no session of its own: the session's
// liveness is its renewals. Every third of the TTL (with a WithSuspendAfter
// part below 1/2, every two thirds of that part) its loop renews every
// Lease it holds (an idle session asks the server's version instead), and
// a round counts once all of them are acknowledged; its holders are
// Suspended after WithSuspendAfter's part of the TTL without a counted
// round, and Lost at the deadline, the send of the last counted round plus
// the TTL. Everything the session holds is then lost with it, and the
// elections on it are done.
type Session struct {
	cs      kubernetes.Interface
	id      string
	ttl     time.Duration
	log     *zap.Logger
	metrics *metrics.Metrics

	mb      *actor.Mailbox[func()]
	ctx     context.Context // ends when the session stops
	cancel  context.CancelFunc
	stopped chan struct{} // closed when the loop has returned
	done    chan struct{} // closed when the session is lost or closed
	errMu   sync.Mutex
	err     error
	helpers sync.WaitGroup
	closeMu sync.Mutex
	closed  bool // Close was called; under closeMu

	// Loop only.
	services  map[*service]struct{}
	clock     driver.Clock
	nextRound time.Time
	ended     bool
}

// NewSession checks that the API server is Kubernetes 1.35 or later (else
// an error wrapping ErrServerTooOld) and starts a session on cs with the
// identity WithIdentity gives (default: the host's name and a random
// suffix), the TTL of WithTTL (default DefaultTTL), suspending its holders
// after WithSuspendAfter's part of it. WithContext bounds the version
// check. The caller owns cs.
func NewSession(cs kubernetes.Interface, opts ...Option) (*Session, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("k8sio: new session: %w", err)
	}
	if o.session != nil {
		return nil, fmt.Errorf("k8sio: new session: WithSession: %w", ErrInvalidArgument)
	}
	return newSession(cs, o)
}

func newSession(cs kubernetes.Interface, o options) (*Session, error) {
	if nilness.Is(cs) {
		return nil, fmt.Errorf("k8sio: nil client: %w", ErrInvalidArgument)
	}
	id := o.identity
	if id == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "disco"
		}
		id = host + "-" + randomHex(4)
	}
	sent := time.Now()
	if err := CheckServer(o.Context, cs); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		cs: cs, id: id, ttl: o.TTL, log: o.Logger, metrics: o.Metrics,
		mb: actor.NewMailbox[func()](), ctx: ctx, cancel: cancel,
		stopped: make(chan struct{}), done: make(chan struct{}),
		services: map[*service]struct{}{},
		clock:    driver.NewClock(sent, o.TTL, driver.SuspendPart(o.TTL, o.SuspendAfter)),
	}
	s.nextRound = sent.Add(s.clock.RenewEvery())
	s.helpers.Add(1)
	go s.run()
	return s, nil
}

// CheckServer returns an error wrapping ErrServerTooOld unless the API
// server cs speaks to is Kubernetes 1.35 or later: only from 1.35 on is a
// resourceVersion promised to be an integer that orders every write of a
// resource (KEP-5504), which k8sio's tokens rely on. NewSession calls it.
func CheckServer(ctx context.Context, cs kubernetes.Interface) error {
	if ctx == nil {
		return fmt.Errorf("k8sio: check the API server: nil context: %w", ErrInvalidArgument)
	}
	if nilness.Is(cs) {
		return fmt.Errorf("k8sio: nil client: %w", ErrInvalidArgument)
	}
	d := cs.Discovery()
	if nilness.Is(d) || nilness.Is(d.RESTClient()) {
		return fmt.Errorf("k8sio: the client has no REST client to ask the API server's version with (client-go's fake clientset has none): %w", ErrInvalidArgument)
	}
	raw, err := d.RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return fmt.Errorf("k8sio: the API server's version: %w", err)
	}
	var v version.Info
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("k8sio: the API server's version %q: %w", raw, err)
	}
	major, err1 := strconv.Atoi(strings.TrimRight(v.Major, "+"))
	minor, err2 := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err1 != nil || err2 != nil {
		return fmt.Errorf("k8sio: the API server's version %s (major %q, minor %q) is not Kubernetes': %w", v.GitVersion, v.Major, v.Minor, ErrServerTooOld)
	}
	if major < minVersion[0] || major == minVersion[0] && minor < minVersion[1] {
		return fmt.Errorf("k8sio: the API server is %s (%d.%d): a fencing token needs resourceVersions that compare across writes, promised from Kubernetes %d.%d on (KEP-5504): %w",
			v.GitVersion, major, minor, minVersion[0], minVersion[1], ErrServerTooOld)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Identity is the holderIdentity of the Leases the session holds.
func (s *Session) Identity() string { return s.id }

// TTL is the session's time to live, the leaseDurationSeconds of its Leases.
func (s *Session) TTL() time.Duration { return s.ttl }

// Client is the client the session runs on (the caller's).
func (s *Session) Client() kubernetes.Interface { return s.cs }

// Done is closed when the session is lost or closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; then it wraps primitives.ErrLost or
// primitives.ErrClosed.
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close ends every election on the session: each leader resigns (its
// subscribers see Released), each waiting Campaign fails with an error
// wrapping primitives.ErrClosed and its record is deleted. Its requests
// are bounded by 5 s all together, counted from when the loop takes Close
// up: a resign or delete that fails is tried again until then. Before
// that, the loop finishes a request it has under way, which an API server
// that does not answer holds for up to 5 s more (see the package doc).
// Then the loop stops. A second Close returns an error wrapping
// primitives.ErrClosed, also after the session was lost.
func (s *Session) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return fmt.Errorf("k8sio: session %s: already closed: %w", s.id, primitives.ErrClosed)
	}
	s.closed = true
	_, _ = loopCall(s, context.Background(), func() (struct{}, error) {
		if s.ended {
			return struct{}{}, nil // lost: nothing is left to release
		}
		err := fmt.Errorf("k8sio: session %s: %w", s.id, primitives.ErrClosed)
		// One bound for every election's requests together.
		s.closeAll(slices.Collect(maps.Keys(s.services)), err, time.Now().Add(opTimeout))
		s.end(err)
		return struct{}{}, nil
	})
	s.cancel()
	s.helpers.Wait()
	return nil
}

// end records the session's end. Loop only.
func (s *Session) end(err error) {
	if s.ended {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	s.ended = true
	close(s.done)
	s.mb.Close()
}

// lose ends the session as lost: every election gets Lost for its term and
// is done; nothing is written (someone else may hold the Leases by now).
// Loop only.
func (s *Session) lose(cause error, why string) {
	if s.ended {
		return
	}
	err := fmt.Errorf("k8sio: session %s: %v: %w", s.id, cause, primitives.ErrLost)
	s.log.Info("k8sio: session lost", zap.String("identity", s.id), zap.Error(cause))
	for v := range s.services {
		v.endLoop(err, why)
	}
	s.end(err)
	s.cancel()
}

// loopCall runs f on the loop and returns its result; if the loop has
// stopped, the session's error.
func loopCall[T any](s *Session, ctx context.Context, f func() (T, error)) (T, error) {
	v, err := actor.Call(ctx, s.stopped, func(r actor.Reply[T]) bool {
		return s.mb.Post(func() { r.Answer(f()) })
	})
	if errors.Is(err, actor.ErrStopped) {
		if serr := s.Err(); serr != nil {
			return v, serr
		}
	}
	return v, err
}

// post runs f on the loop, unless the loop has stopped.
func (s *Session) post(f func()) { s.mb.Post(f) }

// go runs f on a helper goroutine that Close waits for.
func (s *Session) goHelper(f func()) {
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		f()
	}()
}

// reqCtx bounds a request of the loop: opTimeout, never past the clock's
// deadline (so that a request the server does not answer never makes a
// Lost late), and, until the session is suspended, past its suspension
// point by no more than a sixth of the TTL (so that Suspended is at most
// that late). Loop only.
func (s *Session) reqCtx() (context.Context, context.CancelFunc) { return s.reqCtxBy(time.Time{}) }

// reqCtxBy is reqCtx, also bounded by by (zero: no bound of its own): the
// deadline of the work the request is part of (a Close's). Loop only.
func (s *Session) reqCtxBy(by time.Time) (context.Context, context.CancelFunc) {
	now := time.Now()
	d := now.Add(opTimeout)
	if !by.IsZero() && by.Before(d) {
		d = by
	}
	if dl := s.clock.Deadline(); dl.Before(d) {
		d = dl
	}
	if !s.clock.Suspended() {
		if at := s.clock.Next().Add(s.ttl / 6); at.Before(d) {
			d = at
		}
	}
	return context.WithDeadline(s.ctx, d)
}

// run is the session's event loop: the functions posted to its mailbox
// and its timer, set to the next renewal round, the clock's next
// suspension point or deadline, the moment a waiting candidate may take
// its Lease, or a failed resign's retry, whichever comes first. The loop
// makes its requests itself, one at a time, each bounded by reqCtx.
func (s *Session) run() {
	defer s.helpers.Done()
	defer close(s.stopped)
	defer s.mb.Close()
	timer := time.NewTimer(time.Until(s.next()))
	defer timer.Stop()
	var buf []func()
	for {
		select {
		case <-s.mb.Ready():
			buf = s.mb.Drain(buf)
			s.metrics.Drained(len(buf))
			for _, f := range buf {
				f()
			}
			s.tick()
		case <-timer.C:
			s.tick()
		case <-s.ctx.Done():
			return
		}
		if s.ended {
			for _, f := range s.mb.Drain(buf) {
				f()
			}
			return
		}
		timer.Reset(time.Until(s.next()))
	}
}

// next is when the loop has something to do. Loop only.
func (s *Session) next() time.Time {
	at := s.nextRound
	if n := s.clock.Next(); !n.IsZero() && n.Before(at) {
		at = n
	}
	for v := range s.services {
		if c := v.camp; c != nil && c.wakeAt.Before(at) {
			at = c.wakeAt
		}
		if r := v.orphanRetry; !r.IsZero() && r.Before(at) {
			at = r
		}
	}
	return at
}

// tick acts on the clock, renews when a round is due, lets waiting
// candidates whose time has come try, and tries again the failed resigns
// that are due. Loop only.
func (s *Session) tick() {
	if s.ended || s.observe(s.clock.Tick(time.Now())) {
		return
	}
	if !time.Now().Before(s.nextRound) {
		s.renew()
		if s.ended {
			return
		}
	}
	for v := range s.services {
		if c := v.camp; c != nil && !time.Now().Before(c.wakeAt) {
			v.try()
			if s.ended {
				return
			}
		}
		if r := v.orphanRetry; !r.IsZero() && !time.Now().Before(r) {
			v.resignOrphan()
			if s.ended {
				return
			}
		}
	}
}

// observe tells the services what the clock reported; true if the session
// is lost. Loop only.
func (s *Session) observe(c driver.Change) bool {
	switch c {
	case driver.Suspend:
		s.metrics.Suspended()
		for v := range s.services {
			v.Suspend(s.clock.Deadline())
		}
	case driver.Resume:
		for v := range s.services {
			v.Resume()
		}
	case driver.Expire:
		s.lose(fmt.Errorf("no renewal acknowledged within the TTL of %v", s.ttl), metrics.CauseLeaseExpired)
		return true
	}
	return false
}

// renew runs one renewal round: every held Lease is renewed; the round
// counts (the clock is told its send time) once all are acknowledged. A
// Lease that is no longer this session's ends its term and does not stop
// the round from counting. Loop only.
func (s *Session) renew() {
	sent := time.Now()
	ctx, cancel := s.reqCtx()
	defer cancel()
	ok, held := true, false
	for v := range s.services {
		if v.Held() == nil {
			continue
		}
		held = true
		if err := v.renew(ctx, sent); err != nil {
			s.log.Debug("k8sio: renewal failed", zap.String("lease", v.key), zap.Error(err))
			ok = false
		}
	}
	for v := range s.services {
		v.renewRecord(sent)
	}
	if !held {
		// Nothing to renew: the server's answer alone confirms the session.
		if _, err := s.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw(); err != nil {
			ok = false
		}
	}
	now := time.Now()
	if !ok {
		s.nextRound = now.Add(max(s.ttl/10, 50*time.Millisecond))
		return
	}
	s.metrics.Renewed(now.Sub(sent), s.clock.Deadline().Sub(now))
	s.nextRound = sent.Add(s.clock.RenewEvery())
	s.observe(s.clock.Renewed(sent, now, 0))
}
