package redisio

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/primitives/driver"
)

// release ends the hold that m matches: the shell marks the release in
// flight, the release script deletes the hold's key if it is still this
// session's, and the shell settles what it found. A second release while
// one is in flight finds nothing to release (its key may already be gone
// by the first, which is no loss). A release whose caller gave up before
// the loop marked it is settled at once as unsent: the hold stands, and a
// retry can release it.
func (v *service) release(ctx context.Context, m driver.Match) error {
	h, err := loopAsk(v.s, ctx, func(r actor.Reply[driver.Hold]) { v.BeginReleaseFor(m, r.Answer) })
	if err != nil {
		return err
	}
	n, rerr := v.s.releaseBounded(ctx, v.ref(h.Key))
	out := driver.Deleted
	switch {
	case rerr != nil:
		out = driver.Failed
	case n == 0:
		out = driver.Gone
	}
	_, err = loopCall(v.s, context.Background(), func() (struct{}, error) {
		return struct{}{}, v.SettleRelease(h, out, rerr)
	})
	return err
}

// checkHeldLoop ends the hold with Lost if the refresh found its key gone:
// the shell settles the release as Gone (Lost) at once, before anything
// else is done, so that nobody else is granted the name before its owner
// is told (the dead hold, a tombstone, keeps the name until a helper takes
// it out). The helper then takes the dead hold out of the queue and its
// record, which wakes the next; meanwhile the service's next acquisition
// waits for it (cleaning), so that the owner's own next try does not find
// its dead hold ahead. Loop only.
func (v *service) checkHeldLoop(gone map[string]bool) {
	h := v.Held()
	if h == nil || h.Releasing() || !gone[h.Key] {
		return
	}
	g, err := v.BeginRelease(driver.CreatedAt(h.Created))
	if err != nil {
		return
	}
	done := make(chan struct{})
	v.cleaning.Store(&done) // before the Lost, which lets the owner try again
	_ = v.SettleRelease(g, driver.Gone, nil)
	s, ref, hook := v.s, v.ref(g.Key), v.s.afterCleanup
	s.goHelper(func() {
		defer v.cleaning.CompareAndSwap(&done, nil)
		defer close(done)
		ctx, cancel := s.ownCtx(context.Background(), opTimeout)
		defer cancel()
		if _, err := s.releaseOwn(ctx, nil, ref, time.Time{}); err != nil {
			s.log.Debug("redisio: remove a deleted hold", zap.String("key", g.Key), zap.Error(err))
		}
		if hook != nil {
			hook()
		}
	})
}

// appendKeys adds the service's hold keys, held and waiting. Loop only.
func (v *service) appendKeys(keys []string) []string {
	if h := v.Held(); h != nil {
		keys = append(keys, h.Key)
	}
	for k := range v.waiting {
		keys = append(keys, k)
	}
	return keys
}

// wokenLoop wakes a double barrier party's waits, and the waiter whose key
// heads the queue now. Loop only.
func (v *service) wokenLoop(head string) {
	for w := range v.listeners {
		v.wakeLoop(w)
	}
	if w, ok := v.waiting[head]; ok {
		v.wakeLoop(w)
	}
}

// wakeLoop wakes the waiter of w, counted as a wakeup unless one is
// pending there already. Loop only.
func (v *service) wakeLoop(w chan struct{}) {
	select {
	case w <- struct{}{}:
		v.Spec().Metrics.Woken(v.Spec().Kind, 1)
	default:
	}
}

// rechecked counts a look taken on the re-check timer. Any goroutine.
func (v *service) rechecked() {
	v.Spec().Metrics.Rechecked(v.Spec().Kind)
}
