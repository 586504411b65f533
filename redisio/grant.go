package redisio

import (
	"context"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// release ends the current hold (any, of mode if mode is not 0) or the one
// named by created.
func (v *service) release(ctx context.Context, created int64, any bool, mode byte) error {
	h, err := loopCall(v.s, ctx, func() (hold, error) {
		if v.ended || v.closing {
			return hold{}, v.Err()
		}
		if v.held == nil || v.held.releasing || (!any && (created == 0 || created != v.held.created)) ||
			(mode != 0 && v.held.mode != mode) {
			return hold{}, v.errf("%w", v.notHeld)
		}
		v.held.releasing = true
		return *v.held, nil
	})
	if err != nil {
		return err
	}
	n, err := v.s.release(ctx, v.ref(h.key))
	if err != nil {
		v.s.mb.Post(func() {
			if v.held != nil && v.held.created == h.created {
				v.held.releasing = false
			}
		})
		return v.errf("release: %w", err)
	}
	_, _ = loopCall(v.s, context.Background(), func() (struct{}, error) {
		if !v.ended && v.held != nil && v.held.created == h.created {
			if n == 1 {
				v.endHold(primitives.Released{Key: h.key, Token: tokenOf(h), Created: h.created})
			} else {
				v.endHold(primitives.Lost{Key: h.key, Token: tokenOf(h), Created: h.created,
					Err: v.errf("key %s deleted: %w", h.key, primitives.ErrLost)})
			}
		}
		return struct{}{}, nil
	})
	if n == 0 {
		return v.errf("%w", v.notHeld)
	}
	return nil
}

func tokenOf(h hold) fencing.Token { return fencing.Token(h.token) }

// endHold ends the current hold with ev. Loop only.
func (v *service) endHold(ev primitives.Event) {
	v.held = nil
	v.term.Store(nil)
	select {
	case <-v.sem:
	default:
	}
	v.fan.Publish(ev)
}

// checkHeldLoop ends the hold with Lost if the refresh found its key gone,
// and has a helper take it out of the queue so that the next one is woken.
// Loop only.
func (v *service) checkHeldLoop(gone map[string]bool) {
	h := v.held
	if h == nil || h.releasing || v.closing || !gone[h.key] {
		return
	}
	v.endHold(primitives.Lost{Key: h.key, Token: tokenOf(*h), Created: h.created,
		Err: v.errf("key %s deleted: %w", h.key, primitives.ErrLost)})
	s, ref := v.s, v.ref(h.key)
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, _ = s.release(ctx, ref)
	}()
}

// suspendLoop and resumeLoop report the session's suspension to the
// holder. Loop only.
func (v *service) suspendLoop(deadline time.Time) {
	if h := v.held; h != nil && !h.suspended {
		h.suspended = true
		v.fan.Publish(primitives.Suspended{Key: h.key, Token: tokenOf(*h), Created: h.created, Deadline: deadline})
	}
}

func (v *service) resumeLoop() {
	if h := v.held; h != nil && h.suspended {
		h.suspended = false
		v.fan.Publish(primitives.Resumed{Key: h.key, Token: tokenOf(*h), Created: h.created})
	}
}

// appendKeys adds the service's hold keys, held and waiting. Loop only.
func (v *service) appendKeys(keys []string) []string {
	if v.held != nil {
		keys = append(keys, v.held.key)
	}
	for k := range v.waiting {
		keys = append(keys, k)
	}
	return keys
}

// wokenLoop wakes the waiter whose key heads the queue now, and an
// election's watcher. Loop only.
func (v *service) wokenLoop(head string) {
	if w, ok := v.waiting[head]; ok {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	if v.kind == kindElection {
		select {
		case v.watchWake <- struct{}{}:
		default:
		}
	}
}
