package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/reach"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// Timeouts for the requests a session makes on its own behalf, outside any
// caller's context.
const (
	grantTimeout   = 10 * time.Second // the lease driver.Hold, without WithContext
	revokeTimeout  = 5 * time.Second  // Close's lease revoke
	requestTimeout = 2 * time.Second  // the first bound of one attempt (see attempt)
)

// ErrClientClosed is wrapped by the errors of calls that need the etcd client
// after it was closed.
var ErrClientClosed = errors.New("etcdio: etcd client closed")

// Session is one lease and the event loop that owns it. See the package doc
// for the loop's rules. A Session is safe for concurrent use.
type Session struct {
	cli     *clientv3.Client
	lease   clientv3.LeaseID
	ttl     time.Duration
	log     *zap.Logger
	metrics *Metrics

	mb     *actor.Mailbox[func()]
	done   chan struct{} // closed by the loop when the session ends
	errMu  sync.Mutex
	err    error
	ctx    context.Context // ends with the session; stops the helpers
	cancel context.CancelFunc
	wg     sync.WaitGroup // the helpers: keepalive, watches, reads, cleanups
	// helpersDone is set (under helpersMu) once Close waits for the
	// helpers: no helper starts after it.
	helpersMu   sync.Mutex
	helpersDone bool
	probe       chan struct{} // asks the keepalive helper to renew now
	seq         atomic.Uint64 // makes this session's key names unique
	// streamEpoch names the gRPC stream watches use; bumped when one goes
	// silent (see follow).
	streamEpoch atomic.Uint64
	// probeMu guards the stream and the time of the latest progress request
	// a quiet watch sent (see claimProbe).
	probeMu    sync.Mutex
	probeEpoch uint64
	probeAt    time.Time
	// ackWait is how long the keepalive helper waits for an acknowledgement
	// (see keepalive). Owned by the keepalive helper.
	ackWait time.Duration
	// renewEvery is the pause between an acknowledgement and the next
	// keepalive (see driver.Clock.RenewEvery).
	renewEvery time.Duration
	// bound is the bound of the session's next attempt (see attempt).
	bound attemptBound
	// unsure holds the keys to delete once more after their deletion (see
	// markUnsure).
	unsureMu sync.Mutex
	unsure   map[string]struct{}

	closeOnce sync.Once
	closeErr  error

	// Owned by the loop.
	clock     driver.Clock // the lease's deadline, suspension and end
	lossCause string       // why the session was lost, for metrics
	timer     *time.Timer  // set for the clock's next moment
	checking  bool         // a lease check is in flight
	mirrors   map[mirrorID]*mirror
	claims    map[string]claim
	services  map[*service]struct{}
}

// NewSession grants a lease and starts the session's event loop and
// keepalive. It fails with an error wrapping ErrInvalidArgument on bad input,
// and with the etcd error if the lease cannot be granted in time (see
// WithContext). WithSession is not accepted here.
func NewSession(cli *clientv3.Client, opts ...Option) (*Session, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("etcdio: NewSession: %w", err)
	}
	if o.session != nil {
		return nil, fmt.Errorf("etcdio: NewSession: WithSession: %w", ErrInvalidArgument)
	}
	if err := checkLockValue("session", o); err != nil {
		return nil, fmt.Errorf("etcdio: NewSession: %w", err)
	}
	s, err := newSession(cli, o)
	if err != nil {
		return nil, fmt.Errorf("etcdio: NewSession: %w", err)
	}
	return s, nil
}

func checkClient(cli *clientv3.Client) error {
	if cli == nil {
		return fmt.Errorf("nil etcd client: %w", ErrInvalidArgument)
	}
	if cli.Ctx().Err() != nil {
		return fmt.Errorf("etcd client is closed: %w", ErrInvalidArgument)
	}
	return nil
}

// constructing bounds a constructor's request as WithContext says: by
// o.Context, by grantTimeout, and by the client's life.
func constructing(cli *clientv3.Client, o options) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(o.Context, grantTimeout)
	stop := context.AfterFunc(cli.Ctx(), cancel)
	return ctx, func() { stop(); cancel() }
}

func newSession(cli *clientv3.Client, o options) (*Session, error) {
	if err := checkClient(cli); err != nil {
		return nil, err
	}
	ctx, cancel := constructing(cli, o)
	defer cancel()
	sent := time.Now()
	resp, err := cli.Grant(ctx, int64(o.TTL/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", reach.Failed(ctx, "etcd", cli.Endpoints(), sent, "", err))
	}
	ttl := time.Duration(resp.TTL) * time.Second
	s := &Session{
		cli:      cli,
		lease:    resp.ID,
		ttl:      ttl,
		log:      o.Logger.With(zap.String("lease", strconv.FormatInt(int64(resp.ID), 16))),
		metrics:  o.Metrics,
		mb:       actor.NewMailbox[func()](),
		done:     make(chan struct{}),
		probe:    make(chan struct{}, 1),
		clock:    driver.NewClock(sent, ttl, driver.SuspendPart(ttl, o.SuspendAfter)),
		mirrors:  make(map[mirrorID]*mirror),
		claims:   make(map[string]claim),
		services: make(map[*service]struct{}),
	}
	s.renewEvery = s.clock.RenewEvery()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.timer = time.NewTimer(time.Until(s.clock.Next()))
	s.wg.Add(1)
	go s.keepalive()
	go s.run()
	s.log.Debug("session started", zap.Duration("ttl", s.ttl))
	return s, nil
}

// LeaseID returns the session's lease.
func (s *Session) LeaseID() clientv3.LeaseID { return s.lease }

// TTL returns the lease's time to live as granted by etcd.
func (s *Session) TTL() time.Duration { return s.ttl }

// Client returns the etcd client the session uses.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Done is closed when the session ends: its lease was lost or Close was
// called. Every primitive on the session is done then too.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives. Afterwards it wraps primitives.ErrLost
// (the lease expired, was revoked, or could not be kept alive in time) or
// primitives.ErrClosed.
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close ends the session and revokes its lease, so that everything held under
// it is released in etcd at once rather than after the TTL. However many
// primitives run on it, Close makes one request, the revoke, and waits for its
// answer at most 5 s (and returns its error if etcd does not answer). A
// session lost on this side (no keepalive acknowledged in time) may still have
// its lease in etcd, renewed by keepalives that were on their way: Close tries
// to revoke it too, within one request's bound, and returns nil whatever the
// answer (a lease etcd still has then expires within its TTL). It never closes
// the etcd client. A second Close returns an error wrapping ErrClosed.
func (s *Session) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.post(func() { s.end(fmt.Errorf("etcdio: session closed: %w", primitives.ErrClosed)) })
		<-s.done
		s.helpersMu.Lock()
		s.helpersDone = true // no Add may race with the Wait
		s.helpersMu.Unlock()
		s.wg.Wait()
		lost := !errors.Is(s.Err(), primitives.ErrClosed)
		if s.cli.Ctx().Err() != nil {
			if !lost {
				s.closeErr = fmt.Errorf("etcdio: close session: revoke lease %x: %w", int64(s.lease), ErrClientClosed)
			}
			return
		}
		timeout := revokeTimeout
		if lost {
			timeout = s.bound.get()
		}
		ctx, cancel := context.WithTimeout(s.cli.Ctx(), timeout)
		defer cancel()
		_, err := s.cli.Revoke(ctx, s.lease)
		switch {
		case err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound):
		case lost:
			s.log.Debug("lost session: lease not revoked; it expires within its TTL", zap.Error(err))
		default:
			if s.cli.Ctx().Err() != nil {
				err = ErrClientClosed
			}
			s.closeErr = fmt.Errorf("etcdio: close session: revoke lease %x: %w", int64(s.lease), err)
		}
		s.log.Debug("session closed", zap.Error(s.closeErr))
	})
	if !first {
		return fmt.Errorf("etcdio: session already closed: %w", primitives.ErrClosed)
	}
	return s.closeErr
}

// run is the event loop: the only goroutine that touches the state marked
// "Owned by the loop" in this package. It handles three inputs:
//
//   - The mailbox. Every message is a call of one loop-only method, posted by
//     a caller or a helper. From callers: (*service).joined, enqueued,
//     semEnqueued, withdraw, onGrant (withGrant), released,
//     observe, listenersChanged, closed; (*doubleBarrier).watchFor; checkLease (a barrier
//     party's key gone), leaseGone (a write found the lease gone) and end
//     (Close). From the helpers: keptAlive (keepalive), mirrorLoaded,
//     mirrorChanged and mirrorProgressed (a mirror's watch), (*service).looked,
//     aheadLooked and semLooked (a waiter's read), tokenIssued (a grant's
//     token), leaseChecked (checkLease's read); and from a service's timer,
//     watchOwn (its own keys' watch is due).
//   - The timer, set for the clock's next moment (driver.Clock.Next): the
//     lease's deadline (end), and before it the moment no keepalive has
//     been acknowledged for the suspension part of the TTL (suspend).
//
// No message is acted on past the lease's deadline.
func (s *Session) run() {
	var batch []func()
	for {
		select {
		case <-s.mb.Ready():
			testhook.Wait(s, s.ctx.Done())
			batch = s.mb.Drain(batch)
			s.metrics.Drained(len(batch))
			for _, f := range batch {
				// Messages may have waited (a pause, a slow machine);
				// none is acted on past the lease's end.
				if s.tick() {
					return
				}
				f()
				if s.ended() {
					return
				}
			}
		case <-s.timer.C:
			testhook.Wait(s, s.ctx.Done())
			if s.tick() {
				return
			}
			s.armTimer()
		}
	}
}

func (s *Session) expired() error {
	return fmt.Errorf("etcdio: lease %x: no keepalive acknowledged within the TTL of %v: %w",
		int64(s.lease), s.ttl, primitives.ErrLost)
}

func (s *Session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// end ends the session: every service learns why, later posts fail, the
// helpers stop, and Done closes. Loop only.
func (s *Session) end(err error) {
	if s.ended() {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	if !errors.Is(err, primitives.ErrClosed) {
		s.log.Warn("session lost", zap.Error(err))
	}
	for svc := range s.services {
		svc.sessionEnded(err)
	}
	s.services = nil
	for _, m := range s.mirrors {
		m.cancel()
	}
	s.mirrors = nil
	s.mb.Close()
	s.timer.Stop()
	s.cancel()
	close(s.done)
}

// post runs f on the loop. It reports false once the session has ended.
func (s *Session) post(f func()) bool { return s.mb.Post(f) }

// call runs f on the loop and waits for the answer f gives through its Reply.
// If the session ends first, the error is the session's. A nil ctx is
// refused (driver.ContextErr).
func call[T any](ctx context.Context, s *Session, f func(actor.Reply[T])) (T, error) {
	if ctx == nil {
		var zero T
		return zero, driver.ContextErr(ctx)
	}
	v, err := actor.Call(ctx, s.done, func(r actor.Reply[T]) bool {
		return s.post(func() { f(r) })
	})
	if errors.Is(err, actor.ErrStopped) {
		err = s.Err()
	}
	return v, err
}

// goHelper runs f on a helper goroutine of the session: Close waits for it,
// and its ctx (the session's) ends with the session. Once Close has begun
// waiting for the helpers, it starts none and reports false.
func (s *Session) goHelper(f func(ctx context.Context)) bool {
	s.helpersMu.Lock()
	defer s.helpersMu.Unlock()
	if s.helpersDone {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.ctx)
	}()
	return true
}

// ownerID returns a number no other service on this session has. With the
// lease it names the service's keys: see service.nextKey.
func (s *Session) ownerID() uint64 { return s.seq.Add(1) }

// ownPrefix is the prefix of this session's keys under prefix: no other
// session's key starts with it.
func (s *Session) ownPrefix(prefix string) string {
	return prefix + strconv.FormatInt(int64(s.lease), 16) + "-"
}

// checkLease asks etcd, off the loop, whether the lease still exists, and
// tells leaseChecked. A key of this session that vanished was deleted either
// by someone else or with the lease: the answer says which. A question etcd
// does not answer says neither, and is asked again, after a growing pause,
// until etcd answers or the session ends (at its deadline, if etcd stays
// silent). Loop only.
func (s *Session) checkLease() {
	if s.checking {
		return
	}
	s.checking = true
	s.goHelper(func(ctx context.Context) {
		backoff := ctxtime.NewBackoff(100*time.Millisecond, 2*time.Second)
		for {
			rctx, done := s.attempt(ctx)
			resp, err := s.cli.TimeToLive(rctx, s.lease)
			done(err)
			if err == nil || leaseEnded(resp, err) {
				s.post(func() { s.leaseChecked(resp, err) })
				return
			}
			s.log.Debug("lease check failed; asking again", zap.Error(err))
			if !backoff.Wait(ctx) {
				return
			}
		}
	})
}

// leaseGone ends the session: etcd said its lease no longer exists. Loop
// only.
func (s *Session) leaseGone() {
	s.lossCause = CauseLeaseRevoked
	s.end(fmt.Errorf("etcdio: lease %x was revoked or expired: %w", int64(s.lease), primitives.ErrLost))
}

// leaseEnded reports whether a TimeToLive's answer says the lease is gone:
// etcd answers TTL -1 for a lease it no longer has (an older etcd, an
// error). A TTL of 0 is a lease etcd still has, with under a second left
// (etcd truncates the time left to whole seconds): with a TTL of one
// second, every answer.
func leaseEnded(resp *clientv3.LeaseTimeToLiveResponse, err error) bool {
	return err == nil && resp.TTL < 0 || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// leaseChecked ends the session if its lease is gone, and otherwise lets each
// service report the keys it saw vanish as deleted by another client. Loop
// only.
func (s *Session) leaseChecked(resp *clientv3.LeaseTimeToLiveResponse, err error) {
	s.checking = false
	if leaseEnded(resp, err) {
		s.leaseGone()
		return
	}
	for svc := range s.services {
		svc.vanishedConfirmed()
	}
}

// askLease asks etcd whether the session's lease is gone; err is why etcd
// did not say, within ctx.
func (s *Session) askLease(ctx context.Context) (ended bool, err error) {
	rctx, done := s.attempt(ctx)
	resp, err := s.cli.TimeToLive(rctx, s.lease)
	done(err)
	if leaseEnded(resp, err) {
		return true, nil
	}
	return false, err
}
