package etcdio

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// keepalive renews the lease every TTL/3 (more often with a WithSuspendAfter
// part below 1/2: see driver.Clock.RenewEvery) on one keepalive stream, reopened when
// it breaks, and posts each acknowledgement to the loop together with the
// time its request was sent. It runs until the session ends.
//
// A stream whose acknowledgement is late is given up and a new one opened,
// which the client's balancer may place on another member: a member cut off
// from this client answers nothing, and the lease must not wait on it. The
// first wait is short (a tenth of the TTL, at least half a second), so that
// several members can be tried before the lease ends; each late reply in a
// row doubles it, up to the renewal interval, so that a slow but live etcd
// is still heard.
func (s *Session) keepalive() {
	defer s.wg.Done()
	interval := s.renewEvery
	retry := min(interval, 200*time.Millisecond)
	s.ackWait = s.firstAckWait()
	lc := pb.NewLeaseClient(s.cli.ActiveConnection())
	wait := time.NewTimer(0)
	defer wait.Stop()
	<-wait.C
	pause := func(d time.Duration) bool {
		wait.Reset(d)
		select {
		case <-wait.C:
			return true
		case <-s.probe:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	for s.ctx.Err() == nil {
		if !s.keepaliveStream(lc, interval, pause) {
			return
		}
		if !pause(retry) {
			return
		}
	}
}

// firstAckWait is how long a keepalive waits for its acknowledgement after
// one that came in time.
func (s *Session) firstAckWait() time.Duration {
	return min(max(s.ttl/10, 500*time.Millisecond), s.renewEvery)
}

// keepaliveStream runs one keepalive stream until it breaks (true) or the
// session or lease ends (false).
func (s *Session) keepaliveStream(lc pb.LeaseClient, interval time.Duration, pause func(time.Duration) bool) bool {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	defer cancel()
	stream, err := lc.LeaseKeepAlive(ctx)
	if err != nil {
		s.log.Debug("keepalive stream failed to open", zap.Error(err))
		return true
	}
	for {
		testhook.WaitRenewal(s, s.ctx.Done())
		sent := time.Now()
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(s.lease)}); err != nil {
			s.log.Debug("keepalive send failed", zap.Error(err))
			return true
		}
		// A reply that does not come in time means the stream is stuck (a
		// partition, a dead member): reopen it, perhaps elsewhere.
		stuck := time.AfterFunc(s.ackWait, cancel)
		resp, err := stream.Recv()
		late := !stuck.Stop()
		if err != nil {
			if late {
				s.ackWait = min(2*s.ackWait, interval)
			}
			s.log.Debug("keepalive receive failed", zap.Bool("late", late), zap.Error(err))
			return true
		}
		s.ackWait = s.firstAckWait()
		ttl, rtt := resp.TTL, time.Since(sent)
		s.post(func() { s.keptAlive(sent, ttl, rtt) })
		if ttl <= 0 {
			return false
		}
		if !pause(interval) {
			return false
		}
	}
}

// keptAlive records an acknowledged keepalive, sent at sent: the lease
// lives at least until sent+ttl (see driver.Clock). An acknowledgement
// after Suspended resumes the holders; one after the deadline is too late.
// Loop only.
func (s *Session) keptAlive(sent time.Time, ttl int64, rtt time.Duration) {
	if ttl <= 0 {
		s.lossCause = CauseLeaseRevoked
		s.end(fmt.Errorf("etcdio: lease %x expired or was revoked: %w", int64(s.lease), primitives.ErrLost))
		return
	}
	now := time.Now()
	s.metrics.Renewed(rtt, s.clock.Deadline().Sub(now))
	switch s.clock.Renewed(sent, now, time.Duration(ttl)*time.Second) {
	case driver.Expire:
		s.expire()
		return
	case driver.Resume:
		s.log.Info("session resumed", zap.Time("deadline", s.clock.Deadline()))
		for svc := range s.services {
			svc.Resume()
		}
	}
	s.armTimer()
}

// tick acts on the clock now: the session ends at the lease's deadline, and
// its holders are suspended at the suspension point. It reports whether the
// session ended. Loop only.
func (s *Session) tick() bool {
	switch s.clock.Tick(time.Now()) {
	case driver.Expire:
		s.expire()
		return true
	case driver.Suspend:
		s.suspend()
	}
	return false
}

// expire ends the session: no keepalive was acknowledged in time. Loop only.
func (s *Session) expire() {
	s.lossCause = CauseLeaseExpired
	s.end(s.expired())
}

// armTimer sets the loop's timer for the clock's next moment. Loop only.
func (s *Session) armTimer() { s.timer.Reset(time.Until(s.clock.Next())) }

// suspend tells every holder that the session has gone unconfirmed: it may
// be lost at the deadline. Loop only.
func (s *Session) suspend() {
	s.metrics.Suspended()
	s.log.Warn("session suspended: no keepalive acknowledged lately", zap.Time("deadline", s.clock.Deadline()))
	s.probeLease()
	for svc := range s.services {
		svc.Suspend(s.clock.Deadline())
	}
}

// probeLease asks the keepalive helper to renew now, so that a lease that is
// gone is noticed at once. It never blocks.
func (s *Session) probeLease() {
	select {
	case s.probe <- struct{}{}:
	default:
	}
}
