package redisio

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// acquire is Lock, TryLock, RLock, TryRLock and Campaign: one hold at a
// time per service (the shell's Enter), mode for an rwlock, value for an
// election.
func (v *service) acquire(ctx context.Context, try bool, value string, mode rwlock.Mode) (driver.Hold, error) {
	began := time.Now()
	if err := v.Enter(ctx, try); err != nil {
		return driver.Hold{}, err
	}
	if !v.beginAcquisition() { // it ended while this caller waited to enter
		v.Leave()
		return driver.Hold{}, v.Err()
	}
	// Close waits for what follows: the hold it may write is granted to
	// the service or withdrawn before it returns.
	defer v.endAcquisition()
	if c := v.cleaning.Load(); c != nil { // a lost hold is still leaving the queue
		select {
		case <-*c:
		case <-ctx.Done():
			v.Leave()
			return driver.Hold{}, ctx.Err()
		}
	}
	h, err := v.enqueue(ctx, try, value, mode, began)
	if err != nil {
		v.Leave()
	}
	return h, err
}

// wireMode is an rwlock mode as the scripts write it.
func wireMode(m rwlock.Mode) string {
	if m == rwlock.Read {
		return "r"
	}
	return "w"
}

// enqueue creates the hold in Redis and waits for its turn.
func (v *service) enqueue(ctx context.Context, try bool, value string, mode rwlock.Mode, began time.Time) (driver.Hold, error) {
	// An attempt runs on a helper of the session (see request): its
	// caller leaves once ctx ends, and what the attempt queued is
	// withdrawn as it leaves and again when its answer comes. An attempt
	// whose reply was lost (see inAttempts) may have queued its hold: the
	// next one looks for it by that attempt's nonce and keeps it, and
	// enqueues anew only if it finds none. A failed enqueue's hold is withdrawn by its nonce; one the
	// search misses (the script ran after it) is refreshed by nobody and
	// dies with the session's current expiry. The repeats end with the
	// service (its Close, or its session's end): an enqueue repeated for a
	// closed service would only queue a hold to withdraw.
	var unknown string // the nonce of the last attempt whose reply was lost
	e, _, err := inAttempts(ctx, v.Done(), func() (enqueued, error) {
		last, nonce := unknown, strconv.FormatUint(v.s.enqueues.Add(1), 10)
		e, left, err := request(v.s, &v.requests, ctx, v.Done(), func() (enqueued, error) {
			return v.enqueueAttempt(ctx, try, value, mode, last, nonce)
		}, v.undoEnqueue)
		if left {
			// Redis may have run it, its reply not reaching the caller:
			// its hold is withdrawn at once too, by the nonces it may
			// have queued or found a hold by (see abandon).
			v.abandon(func() {
				for _, n := range []string{last, nonce} {
					if n != "" {
						_ = v.tryWithdrawNonce(n)
					}
				}
			})
			return enqueued{}, errLeft
		}
		unknown = e.unknown
		return e, err
	})
	if err != nil {
		if e.unknown != "" {
			v.s.settle(&v.requests, func() { v.withdrawNonce(e.unknown) })
		}
		if cerr := ctx.Err(); cerr != nil {
			// The caller gave up meanwhile: its context's error is the
			// answer, whatever the request met.
			return driver.Hold{}, v.errf("enqueue: %w (%v)", cerr, err)
		}
		if verr := v.Err(); verr != nil { // closed, or its session ended
			return driver.Hold{}, v.errf("enqueue: %w (%v)", verr, err)
		}
		return driver.Hold{}, v.errf("enqueue: %w", err)
	}
	res, found := e.res, e.found
	if found != "" {
		created, err := strconv.ParseInt(found[strings.LastIndexByte(found, '/')+1:], 10, 64)
		if err != nil {
			return driver.Hold{}, v.errf("enqueue: hold key %q: %w", found, err)
		}
		h := driver.Hold{Key: found, Created: created, Mode: mode, Value: value, LeaseID: v.s.id}
		return v.wait(ctx, h, began, true)
	}
	switch res[0] {
	case -1:
		return driver.Hold{}, v.sessionGone()
	case -2:
		return driver.Hold{}, v.errf("%w", v.Spec().Taken)
	}
	h := driver.Hold{Key: v.name + "/" + strconv.FormatInt(res[0], 10), Created: res[0], Token: fencing.Token(res[1]),
		Mode: mode, Value: value, LeaseID: v.s.id}
	if len(res) > 2 {
		h.Slot = int(res[2])
	}
	if h.Token != 0 {
		return v.grant(ctx, h, began)
	}
	if v.s.beforeWait != nil {
		v.s.beforeWait(h.Key)
	}
	return v.wait(ctx, h, began, false)
}

// errLeft is the error of an attempt whose caller left it under way (see
// request): what it wrote is withdrawn when its answer comes.
var errLeft = errors.New("no answer from Redis")

// enqueued is what an attempt of an enqueue learnt: the script's answer,
// or the key of the hold an earlier attempt queued, found by its nonce;
// unknown, if set, is the nonce of an enqueue whose outcome the attempt
// did not learn (its reply or the search for it failed): it may have
// queued a hold.
type enqueued struct {
	res     []int64
	found   string
	unknown string
}

// enqueueAttempt is an attempt of enqueue: it looks for the hold of the
// enqueue with nonce last, if set, whose reply was lost, and keeps it if
// there is one; else it enqueues with nonce.
func (v *service) enqueueAttempt(ctx context.Context, try bool, value string, mode rwlock.Mode, last, nonce string) (enqueued, error) {
	if last != "" {
		key, err := v.findNonce(last)
		if err != nil {
			return enqueued{unknown: last}, err
		}
		if key != "" {
			return enqueued{found: key}, nil
		}
	}
	res, err := v.enqueueOnce(ctx, try, value, mode, nonce)
	if err != nil {
		return enqueued{unknown: nonce}, err
	}
	return enqueued{res: res}, nil
}

// undoEnqueue withdraws what an attempt whose caller left queued (see
// request), given its answer.
func (v *service) undoEnqueue(e enqueued, err error) {
	switch {
	case e.unknown != "":
		v.withdrawNonce(e.unknown)
	case e.found != "":
		v.withdrawNow(e.found)
	case err == nil && len(e.res) > 0 && e.res[0] >= 0:
		v.withdrawNow(v.name + "/" + strconv.FormatInt(e.res[0], 10))
	}
}

// enqueueOnce runs the service's enqueue script once (see onceScripter),
// bounded by opTimeout and not by ctx.
func (v *service) enqueueOnce(ctx context.Context, try bool, value string, mode rwlock.Mode, nonce string) ([]int64, error) {
	tryArg := "0"
	if try {
		tryArg = "1"
	}
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	once := onceScripter{v.s.asked}
	switch v.kind {
	case kindRWLock:
		return rwEnqueueScript.Run(opCtx, once, []string{v.seq, v.queue, v.granted, v.s.key, v.rtok},
			v.name, tryArg, wireMode(mode), v.s.ttl.Milliseconds(), v.wake, v.s.id, nonce).Int64Slice()
	case kindSemaphore:
		return semEnqueueScript.Run(opCtx, once, []string{v.seq, v.queue, v.granted, v.s.key},
			v.name, tryArg, v.permits, v.s.ttl.Milliseconds(), v.wake, v.s.id, nonce).Int64Slice()
	default:
		return enqueueScript.Run(opCtx, once, []string{v.seq, v.queue, v.granted, v.s.key},
			v.name, tryArg, value, v.s.ttl.Milliseconds(), v.wake, v.s.id, nonce).Int64Slice()
	}
}

// sessionGone tells the loop that Redis no longer has the session's key.
func (v *service) sessionGone() error {
	v.s.loseAsync(errors.New("session key gone"), metrics.CauseLeaseRevoked)
	return v.errf("session %d key gone: %w", v.s.id, primitives.ErrLost)
}

// grant has the shell record h, asked for at began, and answer its
// caller, which announces it (followed by Suspended if the session is
// suspended); if the service ended meanwhile, or the caller gave up (ctx
// ended) before the answer, h is released.
func (v *service) grant(ctx context.Context, h driver.Hold, began time.Time) (driver.Hold, error) {
	got, err := actor.Call(ctx, v.s.stopped, func(r actor.Reply[driver.Hold]) bool {
		return v.s.mb.Post(func() {
			if v.Ended() {
				r.Answer(driver.Hold{}, v.Err())
				return
			}
			delete(v.waiting, h.Key)
			v.Grant(h, began, func(g driver.Hold) bool { return r.Answer(g, nil) })
		})
	})
	if err != nil {
		if serr := v.s.Err(); errors.Is(err, actor.ErrStopped) && serr != nil {
			err = serr
		}
		v.withdraw(h.Key)
	}
	return got, err
}

// wait parks the caller until its hold heads the queue: woken by the
// session's pub/sub when it becomes the head (a wake that came before the
// waiter registered included), or by the recheck timer. It makes no
// request before either, unless look says to look at once (a hold an
// earlier attempt of its enqueue queued: it may be granted already).
func (v *service) wait(ctx context.Context, h driver.Hold, began time.Time, look bool) (driver.Hold, error) {
	wake := make(chan struct{}, 1)
	if _, err := loopCall(v.s, context.Background(), func() (struct{}, error) {
		if v.Ended() {
			return struct{}{}, v.Err()
		}
		v.waiting[h.Key] = wake
		if v.s.takeEarlyWake(h.Key) {
			v.wakeLoop(wake)
		} else if look {
			wake <- struct{}{}
		}
		return struct{}{}, nil
	}); err != nil {
		v.withdraw(h.Key)
		return driver.Hold{}, err
	}
	var place int64 // the hold's place at the last look, once one said
	t := time.NewTimer(v.nextLook(place))
	defer t.Stop()
	for {
		select {
		case <-wake:
		case <-t.C:
			v.rechecked()
		case <-ctx.Done():
			v.withdraw(h.Key)
			return driver.Hold{}, ctx.Err()
		case <-v.Done():
			v.withdraw(h.Key)
			return driver.Hold{}, v.Err()
		}
		// The next timed look counts from this one's start, as a slow
		// answer must not stretch the bound on a missed message.
		t.Reset(v.nextLook(place))
		res, left, err := request(v.s, &v.requests, ctx, v.Done(), func() ([]int64, error) {
			cctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			return v.check(cctx, h.Key)
		}, func([]int64, error) { v.withdrawNow(h.Key) })
		if left { // the check withdraws the hold when it is answered, and abandon at once
			v.abandon(func() { v.withdrawNow(h.Key) })
			if err := ctx.Err(); err != nil {
				return driver.Hold{}, err
			}
			return driver.Hold{}, v.Err()
		}
		if err == nil && res[0] == 0 && len(res) > 1 {
			place = res[1]
		}
		if err != nil {
			v.s.log.Debug("redisio: check", zap.String("key", h.Key), zap.Error(err))
			continue
		}
		switch res[0] {
		case -1:
			v.withdraw(h.Key)
			return driver.Hold{}, v.sessionGone()
		case -3:
			v.withdraw(h.Key)
			if err := v.Err(); err != nil {
				return driver.Hold{}, err
			}
			return driver.Hold{}, v.errf("waiting key %s deleted: %w", h.Key, primitives.ErrLost)
		case 1:
			h.Token, h.Waited = fencing.Token(res[1]), true
			if len(res) > 2 {
				h.Slot = int(res[2])
			}
			return v.grant(ctx, h, began)
		}
	}
}

// check runs the script that grants a waiting hold at its turn.
func (v *service) check(ctx context.Context, key string) ([]int64, error) {
	switch v.kind {
	case kindRWLock:
		return rwCheckScript.Run(ctx, v.s.asked, []string{v.seq, v.queue, v.granted, v.s.key, key, v.rtok}, v.wake).Int64Slice()
	case kindSemaphore:
		return semCheckScript.Run(ctx, v.s.asked, []string{v.seq, v.queue, v.granted, v.s.key, key}, v.permits, v.wake).Int64Slice()
	case kindLock:
		return checkScript.Run(ctx, v.s.asked, []string{v.seq, v.queue, v.granted, v.s.key, key}, "1", v.wake).Int64Slice()
	default:
		return checkScript.Run(ctx, v.s.asked, []string{v.seq, v.queue, v.granted, v.s.key, key}, "0", v.wake).Int64Slice()
	}
}

// findNonce returns the key of the hold that an enqueue with nonce
// queued, or "" if none is queued.
func (v *service) findNonce(nonce string) (string, error) {
	ctx, cancel := v.s.ownCtx(context.Background(), opTimeout)
	defer cancel()
	return ownScript(ctx, v.s, findScript, []string{v.queue, v.s.key}, nonce).Text()
}

// withdrawNonce withdraws the hold that an enqueue with nonce queued, if
// it did (its reply was lost): now, and if the lookup fails, again on a
// session helper until Redis answers or the session ends, which Close of
// the service does not wait for. Until then the hold, refreshed by
// nobody, blocks the name (at most until it expires, and its tombstone if
// it was granted).
func (v *service) withdrawNonce(nonce string) {
	if v.tryWithdrawNonce(nonce) == nil {
		return
	}
	s := v.s
	s.goTracked(func() {
		// s.done closes before Close waits for the helpers.
		_, _, _ = inAttempts(context.Background(), s.done, func() (struct{}, error) {
			return struct{}{}, v.tryWithdrawNonce(nonce)
		})
	})
}

// tryWithdrawNonce looks the hold of nonce up once and withdraws it if
// there is one.
func (v *service) tryWithdrawNonce(nonce string) error {
	key, err := v.findNonce(nonce)
	if err != nil {
		v.s.log.Debug("redisio: find an enqueue without reply", zap.String("nonce", nonce), zap.Error(err))
		return err
	}
	if key != "" {
		v.withdrawNow(key)
	}
	return nil
}

// abandon runs f, which withdraws what a caller wrote, as the caller
// returns an error leaving a request under way (see request): at once, on
// a helper, without waiting for it. That request withdraws it again when
// it is answered, but Redis may hear the caller while its replies do not
// reach it, and meanwhile what it wrote would stay: a hold queued, or
// granted, refreshed by the session, or a party counted.
func (v *service) abandon(f func()) { v.s.goUndo(&v.requests, f) }

// withdraw forgets a waiting key and deletes it in Redis (withdrawNow),
// waiting up to leaveGrace for the delete (see Session.settle).
func (v *service) withdraw(key string) {
	v.s.settle(&v.requests, func() { v.withdrawNow(key) })
}

// withdrawNow forgets a waiting key and deletes it in Redis, within
// opTimeout (and the bounds of ownCtx and ownClient): a key it leaves,
// refreshed by nobody, expires with the session's current expiry.
func (v *service) withdrawNow(key string) {
	v.s.mb.Post(func() { delete(v.waiting, key) })
	ctx, cancel := v.s.ownCtx(context.Background(), opTimeout)
	defer cancel()
	if _, err := v.s.releaseOwn(ctx, nil, v.ref(key), time.Time{}); err != nil {
		v.s.log.Debug("redisio: withdraw", zap.String("key", key), zap.Error(err))
	}
}
