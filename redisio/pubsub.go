package redisio

import (
	"context"
	"fmt"

	"go.uber.org/zap"
)

// subscribe adds the session to a scope's wake channel.
func (s *Session) subscribe(ctx context.Context, ch string) error {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	if s.subs[ch] == 0 {
		if err := s.ps.Subscribe(ctx, ch); err != nil {
			return fmt.Errorf("redisio: subscribe %q: %w", ch, err)
		}
	}
	s.subs[ch]++
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
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := s.ps.Unsubscribe(ctx, ch); err != nil {
		s.log.Debug("redisio: unsubscribe", zap.String("channel", ch), zap.Error(err))
	}
}

// woken passes a wake message to the services of its channel. Loop only.
func (s *Session) woken(ch, head string) {
	for v := range s.services {
		if v.wake == ch {
			v.Spec().Metrics.WakeMessage(v.Spec().Kind)
			v.wokenLoop(head)
		}
	}
}
