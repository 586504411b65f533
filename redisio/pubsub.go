package redisio

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
)

// subscribe adds the session to a name's channel (a leader watch's, a
// double barrier's): the session's own channel, its key, it has from the
// start. The interest counts even if the request fails (go-redis keeps
// the channel and subscribes again when it reconnects): every subscribe
// is undone by one unsubscribe.
func (s *Session) subscribe(ctx context.Context, ch string) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	s.subs[ch]++
	if s.subs[ch] == 1 {
		if err := s.ps.Subscribe(ctx, ch); err != nil {
			return fmt.Errorf("redisio: subscribe %q: %w", ch, err)
		}
	}
	return nil
}

// unsubscribe removes one service's interest in ch.
func (s *Session) unsubscribe(ch string) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.subs[ch]--; s.subs[ch] > 0 {
		return
	}
	delete(s.subs, ch)
	ctx, cancel := s.ownCtx(context.Background(), opTimeout)
	defer cancel()
	if err := s.ps.Unsubscribe(ctx, ch); err != nil {
		s.log.Debug("redisio: unsubscribe", zap.String("channel", ch), zap.Error(err))
	}
}

// woken passes a wake message to the services it is for. Loop only.
//
// On the session's own channel (its key) a message names a hold of this
// session that may now be granted: it wakes that hold's waiter alone. On
// an election's channel it asks the name's leader watch for one read (a
// waiting candidate is woken on the session's own channel, never here);
// on a double barrier's it goes to every party of that channel.
func (s *Session) woken(ch, head string) {
	if ch == s.key {
		s.wokenOwn(head)
		return
	}
	if w := s.leaderWatches[ch]; w != nil {
		w.wokenLoop()
		return
	}
	for v := range s.services {
		if v.kind == kindParty && v.wake == ch {
			v.Spec().Metrics.WakeMessage(v.Spec().Kind)
			v.wokenLoop(head)
		}
	}
}

// wokenOwn wakes the waiter of the hold key on the session's own channel,
// counted as a wake message of its service's kind (of a service on the
// hold's name if there is no waiter: gone, or not registered yet, in which
// case the key is kept for it in early). Loop only.
func (s *Session) wokenOwn(key string) {
	name := key[:max(strings.LastIndexByte(key, '/'), 0)]
	var on *service
	for v := range s.services {
		if w, ok := v.waiting[key]; ok {
			v.Spec().Metrics.WakeMessage(v.Spec().Kind)
			v.wakeLoop(w)
			return
		}
		if v.name == name {
			on = v
		}
	}
	if on != nil {
		on.Spec().Metrics.WakeMessage(on.Spec().Kind)
	}
	if len(s.early) == earlyWakes {
		s.early = slices.Delete(s.early, 0, 1)
	}
	s.early = append(s.early, key)
}

// earlyWakes bounds the wake messages a session keeps for waiters not yet
// registered. One that falls out (or never finds its waiter: the caller
// gave up) costs at most a re-check interval.
const earlyWakes = 16

// takeEarlyWake reports whether a wake message for the hold key came
// before its waiter registered, and forgets it. Loop only.
func (s *Session) takeEarlyWake(key string) bool {
	i := slices.Index(s.early, key)
	if i < 0 {
		return false
	}
	s.early = slices.Delete(s.early, i, i+1)
	return true
}
