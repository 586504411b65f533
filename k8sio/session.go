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
// Leases it holds, one event loop that owns the state of the elections on
// it, and the helpers that make their requests. Kubernetes keeps no
// session of its own: each Lease's liveness is its renewals. Every third
// of the TTL (with a WithSuspendAfter part below 1/2, every two thirds of
// that part) the session renews each Lease it holds, each renewal a
// request of its own; a Lease's holder is Suspended after WithSuspendAfter's
// part of the TTL without an acknowledged renewal of its Lease, and Lost at
// its deadline, the send of its last acknowledged renewal plus the TTL.
// The session itself lives while the API server answers it: an
// acknowledged renewal or take of any of its Leases confirms it, and a
// session that none confirmed for a third of the TTL asks the server's
// version; a session confirmed by nothing for the TTL is lost, with
// everything it holds, and the elections on it are done.
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
	clock     driver.Clock // the session's liveness (see Session)
	nextRound time.Time    // the next ask of the server's version, and renewal of waiting candidates' records
	pinging   bool         // an ask of the server's version is under way
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
	if driver.IsNil(cs) {
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
	if driver.IsNil(cs) {
		return fmt.Errorf("k8sio: nil client: %w", ErrInvalidArgument)
	}
	d := cs.Discovery()
	if driver.IsNil(d) || driver.IsNil(d.RESTClient()) {
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
// are bounded by 5 s all together: a resign or delete that fails is tried
// again until then, and an election's request already under way (bounded
// by 5 s from when it was sent) is finished within that bound too. Then
// the loop stops. A second Close returns an error wrapping
// primitives.ErrClosed, also after the session was lost.
func (s *Session) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return fmt.Errorf("k8sio: session %s: already closed: %w", s.id, primitives.ErrClosed)
	}
	s.closed = true
	done := make(chan struct{})
	if s.mb.Post(func() {
		if s.ended {
			close(done) // lost: nothing is left to release
			return
		}
		err := fmt.Errorf("k8sio: session %s: %w", s.id, primitives.ErrClosed)
		// One bound for every election's requests together.
		s.closeAll(slices.Collect(maps.Keys(s.services)), err, time.Now().Add(opTimeout), func() {
			s.end(err)
			close(done)
		})
	}) {
		select {
		case <-done:
		case <-s.stopped:
		}
	}
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

// reqCtxOn bounds a request: opTimeout and by (zero: no bound of its
// own), never past the deadline of c, the clock that covers the request,
// and, until c is suspended, past its suspension point by no more than a
// sixth of the TTL (so that a request the server does not answer is given
// up, and tried again, soon after its holder is Suspended). Loop only.
func (s *Session) reqCtxOn(c *driver.Clock, by time.Time) (context.Context, context.CancelFunc) {
	now := time.Now()
	d := now.Add(opTimeout)
	if !by.IsZero() && by.Before(d) {
		d = by
	}
	if dl := c.Deadline(); dl.Before(d) {
		d = dl
	}
	if !c.Suspended() {
		if at := c.Next().Add(s.ttl / 6); at.Before(d) {
			d = at
		}
	}
	return context.WithDeadline(s.ctx, d)
}

// run is the session's event loop: the functions posted to its mailbox
// and its timer, set to the next renewal of a Lease or ask of the
// server's version, the next suspension point or deadline of a Lease's
// clock or the session's, the moment a waiting candidate may take its
// Lease, or a failed resign's retry, whichever comes first. The loop
// makes no request itself: helpers make them, and post their answers.
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
		if v.closing {
			continue // its Close's requests are under way: nothing else is due
		}
		if n := v.termNext(); !n.IsZero() && n.Before(at) {
			at = n
		}
		if c := v.camp; c != nil && !c.trying && c.wakeAt.Before(at) {
			at = c.wakeAt
		}
		if r := v.orphanRetry; !r.IsZero() && r.Before(at) {
			at = r
		}
	}
	return at
}

// tick acts on the session's clock and on each term's, renews the Leases
// whose renewal is due, asks the server's version when due, lets waiting
// candidates whose time has come try, and tries again the failed resigns
// that are due. Loop only.
func (s *Session) tick() {
	now := time.Now()
	if s.ended {
		return
	}
	if s.clock.Tick(now) == driver.Expire {
		s.lose(fmt.Errorf("no request acknowledged within the TTL of %v", s.ttl), metrics.CauseLeaseExpired)
		return
	}
	if !now.Before(s.nextRound) {
		s.round(now)
	}
	for v := range s.services {
		if v.closing {
			continue
		}
		v.tickTerm(now)
		if c := v.camp; c != nil && !c.trying && !now.Before(c.wakeAt) {
			v.try()
		}
		if r := v.orphanRetry; !r.IsZero() && !now.Before(r) {
			v.resignOrphan()
		}
	}
}

// round renews the waiting candidates' records that are due and, unless
// an acknowledged renewal or take confirmed the session since the last
// round, asks the server's version: its answer alone confirms the session
// (so that a session whose Leases' requests stall, or that holds none,
// lives while the server answers it). Loop only.
func (s *Session) round(now time.Time) {
	s.nextRound = now.Add(s.clock.RenewEvery())
	for v := range s.services {
		v.renewRecord(now)
	}
	if s.pinging || now.Before(s.clock.LastSent().Add(s.clock.RenewEvery())) {
		return
	}
	s.pinging = true
	ctx, cancel := s.reqCtxOn(&s.clock, time.Time{})
	request(s, ctx, cancel, func(ctx context.Context) (struct{}, error) {
		_, err := s.cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
		return struct{}{}, err
	}, func(_ struct{}, err error) {
		s.pinging = false
		if s.ended {
			return
		}
		if err != nil {
			if retry := time.Now().Add(max(s.ttl/10, 50*time.Millisecond)); retry.Before(s.nextRound) {
				s.nextRound = retry
			}
			return
		}
		s.confirmed(now, time.Now(), time.Time{})
	}, nil)
}

// confirmed records that the API server acknowledged a request of the
// session sent at sent: a renewal, a take, or an ask of its version. The
// margin reported is the time left before deadline, a renewed Lease's
// deadline before this renewal; for a zero deadline, the session's.
// Loop only.
func (s *Session) confirmed(sent, now, deadline time.Time) {
	if s.ended {
		return
	}
	if deadline.IsZero() {
		deadline = s.clock.Deadline()
	}
	s.metrics.Renewed(now.Sub(sent), deadline.Sub(now))
	if s.clock.Renewed(sent, now, 0) == driver.Expire {
		s.lose(fmt.Errorf("no request acknowledged within the TTL of %v", s.ttl), metrics.CauseLeaseExpired)
	}
}
