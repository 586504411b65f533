package memio

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

var (
	errLost   = primitives.ErrLost
	errClosed = primitives.ErrClosed
)

// ErrInvalidArgument is wrapped by every error caused by bad input. It wraps
// primitives.ErrInvalidArgument.
var ErrInvalidArgument = fmt.Errorf("memio: %w", primitives.ErrInvalidArgument)

// Session is one owner's session with a Store, as an etcd lease or a
// ZooKeeper session is: the primitives made on it hold their keys under it,
// and lose them when it ends. It is renewed continuously while healthy;
// its faults (Suspend, StopRenewals, Pause, Expire, FailNext) are what a
// real store's session suffers when the network or the process breaks.
type Session struct {
	st      *Store
	id      int64
	ttl     time.Duration
	log     *zap.Logger
	metrics *metrics.Metrics
	done    chan struct{}

	// Guarded by st.mu.
	err      error
	closed   bool // Close was called
	renewing bool // renewals reach the store
	// stopped: StopRenewals or Suspend stopped the renewals, and no Resume
	// came since; the end of a pause does not let them through then.
	stopped  bool
	clock    driver.Clock // counts from the last renewal once renewing stops
	timer    Timer
	services map[*service]struct{}
	parties  map[*doubleParty]struct{}
	keys     map[*key]struct{}
	failNext error
	frozen   chan struct{} // closed when the last Pause ends
	pauses   int           // Pauses not yet resumed
}

// NewSession starts a session on st: WithTTL, WithSuspendAfter, WithMetrics
// and WithLogger configure it.
func NewSession(st *Store, opts ...Option) (*Session, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("memio: NewSession: %w", err)
	}
	if o.session != nil {
		return nil, fmt.Errorf("memio: NewSession: WithSession: %w", ErrInvalidArgument)
	}
	if err := checkLockValue("session", o); err != nil {
		return nil, fmt.Errorf("memio: NewSession: %w", err)
	}
	if st == nil {
		return nil, fmt.Errorf("memio: NewSession: nil Store: %w", ErrInvalidArgument)
	}
	return newSession(st, o), nil
}

func newSession(st *Store, o options) *Session {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.nextID++
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.With(zap.Int64("session", st.nextID))
	log.Debug("session started", zap.Duration("ttl", o.TTL))
	return &Session{st: st, id: st.nextID, ttl: o.TTL, log: log, metrics: o.Metrics,
		done: make(chan struct{}), renewing: true,
		clock:    driver.NewClock(st.clock.Now(), o.TTL, driver.SuspendPart(o.TTL, o.SuspendAfter)),
		services: map[*service]struct{}{}, parties: map[*doubleParty]struct{}{}, keys: map[*key]struct{}{}}
}

// LeaseID returns the session's id, the LeaseID of every grant on it.
func (s *Session) LeaseID() int64 { return s.id }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session ends: it expired or Close was called.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; afterwards it wraps primitives.ErrLost
// or primitives.ErrClosed.
func (s *Session) Err() error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.err
}

// Close ends the session: everything held under it is released at once. A
// second Close returns an error wrapping primitives.ErrClosed.
func (s *Session) Close() error {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.closed {
		return fmt.Errorf("memio: session already closed: %w", errClosed)
	}
	s.closed = true
	if s.err != nil {
		return nil // it expired (or was lost) first
	}
	s.end(fmt.Errorf("memio: session %d closed: %w", s.id, errClosed), "")
	return nil
}

// Expire ends the session now, as a store does when a session's TTL passes
// unrenewed: its holders are told Lost, its keys are deleted, and others
// acquire with higher tokens.
func (s *Session) Expire() {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.expire()
}

// Suspend stops the session's renewals now and tells its holders at once,
// as a session whose connection is known broken does: they get Suspended
// with the deadline one TTL from now, and the session expires then unless
// Resume comes first. Its requests still reach the store meanwhile (a
// grant made while suspended is followed by Suspended); to freeze them
// too, use Pause. It does nothing to a session that ended.
func (s *Session) Suspend() {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.err != nil {
		return
	}
	s.stopped = true
	s.stopRenewals()
	s.apply(s.clock.Broken(s.st.clock.Now()))
	s.arm()
}

// StopRenewals stops the session's renewals from reaching the store, as a
// partition does, without telling anyone: its holders are told Suspended
// once the suspension part of the TTL (WithSuspendAfter) has passed, and
// the session expires at the deadline, one TTL after now, unless Resume
// comes first.
func (s *Session) StopRenewals() {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.stopped = true
	s.stopRenewals()
	s.arm()
}

// Resume lets the session's renewals reach the store again: holders told
// Suspended are told Resumed. During a Pause they resume once it ends (a
// paused process renews nothing). It does nothing to a session that
// expired.
func (s *Session) Resume() {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.stopped = false
	if s.pauses == 0 {
		s.resume()
	}
}

// resume: see Resume. Locked.
func (s *Session) resume() {
	if s.err != nil || s.renewing {
		return
	}
	now := s.st.clock.Now()
	s.clock.Mended(now)
	switch s.clock.Renewed(now, now, 0) {
	case driver.Resume:
		for svc := range s.services {
			svc.Resume()
		}
	case driver.Expire:
		// Past the deadline (its timer not yet run): a renewal this late
		// revives nothing.
		s.expire()
		return
	}
	s.renewing = true
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// Pause freezes the session as a long garbage collection pause or a
// suspended VM would: its renewals stop (as StopRenewals stops them) and
// every request its primitives make waits, until the returned resume is
// called (once; later calls do nothing). Renewals that StopRenewals or
// Suspend stopped before or during the pause stay stopped after it, until
// Resume. A Lock (Acquire, Campaign) granted during the
// pause returns once it ends; if its ctx ends first, the grant is
// released and the Lock returns ctx's error, and if the grant ended
// meanwhile (the pause outlasted the TTL) the Lock returns the service's
// error. The session expires if the pause outlasts its TTL. Pauses nest:
// the session thaws once every Pause's resume was called.
func (s *Session) Pause() (resume func()) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.stopRenewals()
	s.arm()
	if s.pauses == 0 {
		s.frozen = make(chan struct{})
	}
	s.pauses++
	done := false
	return func() {
		s.st.mu.Lock()
		defer s.st.mu.Unlock()
		if done {
			return
		}
		done = true
		if s.pauses--; s.pauses > 0 {
			return // another Pause still holds
		}
		close(s.frozen)
		s.frozen = nil
		if !s.stopped {
			s.resume()
		}
	}
}

// FailNext makes the next request of the session's primitives (an
// acquisition, a release, a Proclaim) fail with an error wrapping err,
// changing nothing in the store, as a request lost on the network does.
func (s *Session) FailNext(err error) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.failNext = err
}

// failure takes the failure FailNext set, if any. Locked.
func (s *Session) failure() error {
	err := s.failNext
	s.failNext = nil
	if err != nil {
		return fmt.Errorf("memio: request failed: %w", err)
	}
	return nil
}

// gate waits while the session is paused, or until ctx ends; it refuses a
// nil ctx. Every call of a primitive on the session passes it first.
func (s *Session) gate(ctx context.Context) error {
	if ctx == nil {
		return driver.ContextErr(ctx)
	}
	s.st.mu.Lock()
	frozen := s.frozen
	s.st.mu.Unlock()
	if frozen == nil {
		return nil
	}
	select {
	case <-frozen:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopRenewals starts counting the session's deadline from its last
// renewal, now. Locked.
func (s *Session) stopRenewals() {
	if !s.renewing || s.err != nil {
		return
	}
	s.renewing = false
	// Renewed until now: the deadline is one TTL away.
	s.clock = driver.NewClock(s.st.clock.Now(), s.ttl, s.clock.SuspendAfter())
}

// arm sets the timer for the clock's next moment. Locked.
func (s *Session) arm() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.err != nil || s.renewing {
		return
	}
	s.timer = s.st.clock.AfterFunc(s.clock.Next().Sub(s.st.clock.Now()), s.tick)
}

// tick acts on the clock's moment.
func (s *Session) tick() {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	if s.err != nil || s.renewing {
		return
	}
	s.apply(s.clock.Tick(s.st.clock.Now()))
	s.arm()
}

// apply carries out what the clock reported. Locked.
func (s *Session) apply(ch driver.Change) {
	switch ch {
	case driver.Suspend:
		s.metrics.Suspended()
		for svc := range s.services {
			svc.Suspend(s.clock.Deadline())
		}
	case driver.Expire:
		s.expire()
	}
}

// expire ends the session as lost. Locked.
func (s *Session) expire() {
	if s.err == nil {
		s.end(fmt.Errorf("memio: session %d expired: %w", s.id, errLost), metrics.CauseLeaseExpired)
	}
}

// end ends the session and everything on it with err; cause is the
// metrics' cause of a loss, "" for a Close. Locked.
func (s *Session) end(err error, cause string) {
	s.err = err
	if cause != "" {
		s.log.Warn("session lost", zap.Error(err))
	} else {
		s.log.Debug("session closed")
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	for svc := range s.services {
		svc.end(err, cause)
	}
	for p := range s.parties {
		p.end(err)
	}
	for k := range s.keys {
		s.st.remove(k)
	}
	close(s.done)
}
