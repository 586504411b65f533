package redisio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives/driver"
)

// untilNext is the time until the clock's next suspension point or
// deadline. Loop only.
func (s *Session) untilNext() time.Duration {
	return max(time.Until(s.clock.Next()), time.Millisecond)
}

// tick checks the clock: past the suspension point the holders are
// suspended, past the deadline the session is lost. Loop only.
func (s *Session) tick() {
	if !s.ended {
		s.apply(s.clock.Tick(time.Now()))
	}
}

// apply acts on what the clock reported: every service hears a Suspend or
// a Resume; an Expire loses the session. Loop only.
func (s *Session) apply(c driver.Change) {
	switch c {
	case driver.Suspend:
		s.metrics.Suspended()
		deadline := s.clock.Deadline()
		for v := range s.services {
			v.Suspend(deadline)
		}
	case driver.Resume:
		for v := range s.services {
			v.Resume()
		}
	case driver.Expire:
		s.lose(fmt.Errorf("no refresh acknowledged within the TTL %v (deadline %v)",
			s.ttl, s.clock.Deadline().Format(time.RFC3339Nano)), metrics.CauseLeaseExpired)
	}
}

// refreshed records the acknowledgement, after rtt, of a refresh sent at
// sent: sessionGone if the session key was gone, else missing lists the
// hold keys that were. An acknowledgement after the deadline revives
// nothing. Loop only.
func (s *Session) refreshed(sent time.Time, rtt time.Duration, sessionGone bool, missing []string) {
	if s.ended {
		return
	}
	if sessionGone {
		s.lose(errors.New("session key gone"), metrics.CauseLeaseRevoked)
		return
	}
	now := time.Now()
	s.metrics.Renewed(rtt, s.clock.Deadline().Sub(now))
	if s.apply(s.clock.Renewed(sent, now, 0)); s.ended {
		return
	}
	gone := make(map[string]bool, len(missing))
	for _, k := range missing {
		gone[k] = true
	}
	for v := range s.services {
		v.checkHeldLoop(gone)
	}
}

// broken records that a refresh found the connection broken at at: the
// holders are suspended at once. Loop only.
func (s *Session) broken(at time.Time) {
	if !s.ended {
		s.apply(s.clock.Broken(at))
	}
}

// connBroken reports whether err says the connection to Redis is broken
// (refused, reset, closed by the server), not merely slow: a timeout may
// still have reached the server.
func connBroken(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// holdKeys lists every key of the session's holds, held or waiting. Loop
// only.
func (s *Session) holdKeys() []string {
	keys := []string{s.key}
	for v := range s.services {
		keys = v.appendKeys(keys)
	}
	return keys
}

// refresher extends the session's key and its holds' keys every TTL/3 (more
// often with a WithSuspendAfter part below 1/2: driver.Clock.RenewEvery) and
// tells the loop when each acknowledged request was sent, and when one
// found the connection broken. A refresh does not wait for the one before
// it: one whose reply is lost, or a Redis slower than TTL/3 to answer,
// holds back no other, and an answer that comes within the TTL counts by
// its send time (see driver.Clock). At most maxRefreshes are under way;
// each gives up after the TTL (an acknowledgement later than that renews
// nothing), on a clone of the client whose own timeouts are at most the
// TTL, as go-redis heeds a context's deadline only on a client made with
// ContextTimeoutEnabled.
func (s *Session) refresher() {
	defer s.helpers.Done()
	cli := withTimeoutAtMost(s.cli, s.ttl)
	t := time.NewTicker(s.clock.RenewEvery())
	defer t.Stop()
	slots := make(chan struct{}, maxRefreshes)
	var underway sync.WaitGroup
	defer underway.Wait()
	// At the session's end the refreshes under way stop at their current
	// attempt (go-redis checks the context between its attempts), so that
	// Close waits for one attempt at most.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for {
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
		testhook.WaitRenewal(s, s.quit)
		select {
		case slots <- struct{}{}:
		default:
			continue // maxRefreshes unanswered: the clock decides
		}
		keys, err := loopCall(s, context.Background(), func() ([]string, error) { return s.holdKeys(), nil })
		if err != nil {
			return
		}
		underway.Add(1)
		go func() {
			defer underway.Done()
			defer func() { <-slots }()
			s.refresh(ctx, cli, keys)
		}()
	}
}

// maxRefreshes bounds the refreshes under way at once: a TTL's worth.
const maxRefreshes = 3

// refresh sends one refresh of keys, until ctx ends or the TTL passes
// (or a Close's deadline: see ownCtx), and tells the loop its outcome.
func (s *Session) refresh(ctx context.Context, cli *redis.Client, keys []string) {
	sent := time.Now()
	ctx, cancel := s.ownCtx(ctx, s.ttl)
	var res any
	var err error
	if s.ownDeadline.Load() != 0 {
		// A Close is under way: the refresh ends by its deadline.
		cli, err = s.ownClient(time.Time{})
	}
	if err == nil {
		res, err = refreshScript.Run(ctx, cli, keys, s.ttl.Milliseconds()).Result()
	}
	cancel()
	if err != nil {
		s.log.Debug("redisio: refresh", zap.Int64("session", s.id), zap.Error(err))
		if connBroken(err) {
			at := time.Now()
			s.mb.Post(func() { s.broken(at) })
		}
		return
	}
	rtt := time.Since(sent)
	var missing []string
	gone := false
	switch r := res.(type) {
	case int64:
		gone = r == -1
	case []any:
		for _, k := range r {
			if k, ok := k.(string); ok {
				missing = append(missing, k)
			}
		}
	}
	s.mb.Post(func() { s.refreshed(sent, rtt, gone, missing) })
}

// withTimeoutAtMost returns cli if its read and write timeouts are both
// at most d, else a clone of it (sharing its connections) whose timeouts
// are d.
func withTimeoutAtMost(cli *redis.Client, d time.Duration) *redis.Client {
	o := cli.Options()
	if o.ReadTimeout > 0 && o.ReadTimeout <= d && o.WriteTimeout > 0 && o.WriteTimeout <= d {
		return cli
	}
	return cli.WithTimeout(d)
}
