package redisio

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/primitives"
)

// acquire is Lock, TryLock and Campaign: one hold at a time per service.
func (v *service) acquire(ctx context.Context, try bool, value string, mode byte) (hold, error) {
	if err := v.Err(); err != nil {
		return hold{}, err
	}
	if err := ctx.Err(); err != nil {
		return hold{}, err
	}
	if try {
		select {
		case v.sem <- struct{}{}:
		default:
			return hold{}, v.errf("%w", v.taken)
		}
	} else {
		select {
		case v.sem <- struct{}{}:
		case <-ctx.Done():
			return hold{}, ctx.Err()
		case <-v.done:
			return hold{}, v.Err()
		}
	}
	h, err := v.enqueue(ctx, try, value, mode)
	if err != nil {
		<-v.sem
	}
	return h, err
}

// enqueue creates the hold in Redis and waits for its turn.
func (v *service) enqueue(ctx context.Context, try bool, value string, mode byte) (hold, error) {
	tryArg := "0"
	if try {
		tryArg = "1"
	}
	// The script's outcome must be known to withdraw, so it is not cut
	// short by ctx. An unknown outcome (no reply) is withdrawn by the
	// hold's nonce; a hold the search misses (the script ran after it) is
	// refreshed by nobody and dies with the session's current expiry.
	nonce := strconv.FormatUint(v.s.enqueues.Add(1), 10)
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	var res []int64
	var err error
	if v.kind == kindRWLock {
		res, err = rwEnqueueScript.Run(opCtx, v.s.cli, []string{v.seq, v.queue, v.granted, v.s.key, v.rtok},
			v.name, tryArg, string(mode), v.s.ttl.Milliseconds(), v.wake, v.s.id, nonce).Int64Slice()
	} else {
		res, err = enqueueScript.Run(opCtx, v.s.cli, []string{v.seq, v.queue, v.granted, v.s.key},
			v.name, tryArg, value, v.s.ttl.Milliseconds(), v.wake, v.s.id, nonce).Int64Slice()
	}
	cancel()
	if err != nil {
		v.withdrawNonce(nonce)
		if cerr := ctx.Err(); cerr != nil {
			// The caller gave up meanwhile: its context's error is the
			// answer, whatever the request met.
			return hold{}, v.errf("enqueue: %w (%v)", cerr, err)
		}
		return hold{}, v.errf("enqueue: %w", err)
	}
	switch res[0] {
	case -1:
		return hold{}, v.sessionGone()
	case -2:
		return hold{}, v.errf("%w", v.taken)
	}
	h := hold{key: v.name + "/" + strconv.FormatInt(res[0], 10), mode: mode, created: res[0], token: res[1], value: value}
	if h.token != 0 {
		return h, v.grant(h)
	}
	return v.wait(ctx, h)
}

// sessionGone tells the loop that Redis no longer has the session's key.
func (v *service) sessionGone() error {
	v.s.loseAsync(errors.New("session key gone"))
	return v.errf("session %d key gone: %w", v.s.id, primitives.ErrLost)
}

// grant records h as held and publishes Acquired, followed at once by
// Suspended (with the session's deadline) if the session is suspended; or
// it releases h if the service ended meanwhile.
func (v *service) grant(h hold) error {
	_, err := loopCall(v.s, context.Background(), func() (struct{}, error) {
		if v.ended || v.closing {
			return struct{}{}, v.Err()
		}
		delete(v.waiting, h.key)
		hh := h
		v.held = &hh
		v.term.Store(&h)
		v.fan.Publish(primitives.Acquired{Key: h.key, Token: tokenOf(h), Created: h.created})
		if v.s.suspended {
			// Granted in doubt: told at once, as the session's other holders were.
			v.suspendLoop(v.s.lastAck.Add(v.s.ttl))
		}
		return struct{}{}, nil
	})
	if err != nil {
		v.withdraw(h.key)
	}
	return err
}

// wait parks the caller until its hold heads the queue: woken by the
// session's pub/sub when it becomes the head, or by the recheck timer.
func (v *service) wait(ctx context.Context, h hold) (hold, error) {
	wake := make(chan struct{}, 1)
	if _, err := loopCall(v.s, context.Background(), func() (struct{}, error) {
		if v.ended || v.closing {
			return struct{}{}, v.Err()
		}
		v.waiting[h.key] = wake
		return struct{}{}, nil
	}); err != nil {
		v.withdraw(h.key)
		return hold{}, err
	}
	t := time.NewTimer(0) // look once at once: a wake may have come before the loop knew the key
	defer t.Stop()
	for {
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			v.withdraw(h.key)
			return hold{}, ctx.Err()
		case <-v.done:
			v.withdraw(h.key)
			return hold{}, v.Err()
		}
		t.Reset(v.recheck())
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		res, err := v.check(cctx, h.key)
		cancel()
		if err != nil {
			v.s.log.Debug("redisio: check", zap.String("key", h.key), zap.Error(err))
			continue
		}
		switch res[0] {
		case -1:
			v.withdraw(h.key)
			return hold{}, v.sessionGone()
		case -3:
			v.withdraw(h.key)
			if err := v.Err(); err != nil {
				return hold{}, err
			}
			return hold{}, v.errf("waiting key %s deleted: %w", h.key, primitives.ErrLost)
		case 1:
			h.token = res[1]
			return h, v.grant(h)
		}
	}
}

// check runs the script that grants a waiting hold at its turn.
func (v *service) check(ctx context.Context, key string) ([]int64, error) {
	switch v.kind {
	case kindRWLock:
		return rwCheckScript.Run(ctx, v.s.cli, []string{v.seq, v.queue, v.granted, v.s.key, key, v.rtok}, v.wake).Int64Slice()
	case kindLock:
		return checkScript.Run(ctx, v.s.cli, []string{v.seq, v.queue, v.granted, v.s.key, key}, "1", v.wake).Int64Slice()
	default:
		return checkScript.Run(ctx, v.s.cli, []string{v.seq, v.queue, v.granted, v.s.key, key}, "0", v.wake).Int64Slice()
	}
}

// withdrawNonce withdraws the hold that an enqueue with nonce created, if
// it did: its reply was lost.
func (v *service) withdrawNonce(nonce string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	key, err := findScript.Run(ctx, v.s.cli, []string{v.queue, v.s.key}, nonce).Text()
	if err != nil {
		v.s.log.Debug("redisio: find an enqueue without reply", zap.String("nonce", nonce), zap.Error(err))
		return
	}
	if key != "" {
		v.withdraw(key)
	}
}

// withdraw forgets a waiting key and deletes it in Redis.
func (v *service) withdraw(key string) {
	v.s.mb.Post(func() { delete(v.waiting, key) })
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := v.s.release(ctx, v.ref(key)); err != nil {
		v.s.log.Debug("redisio: withdraw", zap.String("key", key), zap.Error(err))
	}
}
