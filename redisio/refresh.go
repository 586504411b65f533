package redisio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/testhook"
)

// suspendAfter is how long without an acknowledged refresh makes holders
// Suspended.
func (s *Session) suspendAfter() time.Duration { return s.ttl / 2 }

// nextTick is the time until the next suspension point or deadline. Loop
// only.
func (s *Session) nextTick() time.Duration {
	at := s.lastAck.Add(s.ttl)
	if !s.suspended {
		at = s.lastAck.Add(s.suspendAfter())
	}
	return max(time.Until(at), time.Millisecond)
}

// tick loses the session past its deadline and suspends its holders past
// the suspension point. Loop only.
func (s *Session) tick() {
	if s.ended {
		return
	}
	now := time.Now()
	deadline := s.lastAck.Add(s.ttl)
	if !now.Before(deadline) {
		s.lose(fmt.Errorf("no refresh acknowledged within the TTL %v (deadline %v)", s.ttl, deadline.Format(time.RFC3339Nano)))
		return
	}
	if !s.suspended && !now.Before(s.lastAck.Add(s.suspendAfter())) {
		s.suspended = true
		for v := range s.services {
			v.suspendLoop(deadline)
		}
	}
}

// refreshed records a refresh sent at sent: missing is nil when the
// session key was extended, with the hold keys that were gone. Loop only.
func (s *Session) refreshed(sent time.Time, sessionGone bool, missing []string) {
	if s.ended {
		return
	}
	if sessionGone {
		s.lose(errors.New("session key gone"))
		return
	}
	s.tick() // a refresh acknowledged after the deadline does not revive it
	if s.ended {
		return
	}
	if sent.After(s.lastAck) {
		s.lastAck = sent
	}
	if s.suspended {
		s.suspended = false
		for v := range s.services {
			v.resumeLoop()
		}
	}
	gone := make(map[string]bool, len(missing))
	for _, k := range missing {
		gone[k] = true
	}
	for v := range s.services {
		v.checkHeldLoop(gone)
	}
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

// refresher extends the session's key and its holds' keys every TTL/3 and
// tells the loop when each acknowledged request was sent.
func (s *Session) refresher() {
	defer s.helpers.Done()
	every := s.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
		testhook.WaitRenewal(s, s.quit)
		keys, err := loopCall(s, context.Background(), func() ([]string, error) { return s.holdKeys(), nil })
		if err != nil {
			return
		}
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), every)
		res, err := refreshScript.Run(ctx, s.cli, keys, s.ttl.Milliseconds()).Result()
		cancel()
		if err != nil {
			s.log.Debug("redisio: refresh", zap.Int64("session", s.id), zap.Error(err))
			continue
		}
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
		s.mb.Post(func() { s.refreshed(sent, gone, missing) })
	}
}
