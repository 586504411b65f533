package redisio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
)

// doubleBarrier is one party of a double barrier: a service of kind
// kindParty, whose session refreshes the party's key while it is in the
// barrier and takes it out (dbLeaveScript) when the session ends. See
// NewDoubleBarrier for the rules, scripts.go for the keys.
type doubleBarrier struct {
	face
	v     *service
	count int

	mu      sync.Mutex // one Enter or Leave at a time; guards what follows
	entered bool       // Enter succeeded and Leave has not
	key     string     // the party's key while entered
	round   string     // the round it entered
}

var _ barrier.DoubleBarrier = (*doubleBarrier)(nil)

// NewDoubleBarrier returns one party of the double barrier name for count
// parties. Enter counts the party in (its key, name/dbarrier.<id>, carries
// its session's expiry) and returns once count parties have entered; the
// count-th Enter marks the round full in the script that counts it, and a
// further Enter is refused with barrier.ErrFull until the round is over.
// Leave takes the party's key out and returns once every party of the
// round has left or is gone; the last one's script deletes every key of
// the round. A party whose session is lost, or whose session key is
// deleted, is gone from the barrier with its key: the next script that
// looks drops it, so the others neither count nor wait for it. An Enter
// whose ctx ends, or whose script's reply is lost, takes its key out
// before it returns ctx.Err() (or an error wrapping the error), unless
// its round is complete by then: the others may have passed counting it, so it is in,
// and Enter returns nil. Redis runs the count and the taking out one at a
// time: a party taken out is never counted. While Redis does not answer,
// though, Enter returns its ctx's error without knowing whether the party
// was counted (see Giving up in the package doc): its script may have
// run, or may run after Enter returned, and a round completed meanwhile
// lets the others pass counting it. Such a party is taken out, whatever
// its round, by a withdrawal Enter sends as it returns, and again when
// Redis answers the request Enter left (or its key expires with its
// session): where Redis hears the party but its replies do not reach it,
// it is out as soon as Redis runs that withdrawal.
// Waits wake on the name's channel name/dbarrier.wake, with a re-check
// every TTL/4 (50 ms to 1 s) for a party that dies without a word.
//
// Without WithSession the party runs on a session of its own, closed by
// Close. Every party of a name must be given the same count: an Enter
// that finds another count fails with an error wrapping
// primitives.ErrInvalidArgument. Other bad input (count below 1, the
// inputs NewLock refuses) is an error wrapping primitives.ErrInvalidArgument,
// and nothing is written to Redis. The keys are the name's own and no
// lock, rwlock or election's on the same name.
func NewDoubleBarrier(cli *redis.Client, name string, count int, opts ...Option) (barrier.DoubleBarrier, error) {
	if count < 1 {
		return nil, fmt.Errorf("redisio: double barrier %q: count %d, want at least 1: %w", name, count, primitives.ErrInvalidArgument)
	}
	v, err := newService(cli, name, kindParty, opts)
	if err != nil {
		return nil, err
	}
	return &doubleBarrier{face: v, v: v, count: count}, nil
}

func (d *doubleBarrier) Count() int { return d.count }

// keys are the scripts' KEYS: the hash, the parties, the session, the
// party's key.
func (d *doubleBarrier) keys(key string) []string {
	return []string{d.v.granted, d.v.queue, d.v.s.key, key}
}

// Enter counts this party in and waits until count parties have entered;
// if ctx ends first, it returns ctx.Err() (see NewDoubleBarrier).
func (d *doubleBarrier) Enter(ctx context.Context) error {
	return ctxtime.Alone(ctx, d.enter(ctx)) // ctx.Err() itself, as barrier.DoubleBarrier promises
}

func (d *doubleBarrier) enter(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx, "enter"); err != nil {
		return err
	}
	if d.entered {
		return d.v.errf("%w", barrier.ErrEntered)
	}
	v := d.v
	if !v.beginAcquisition() {
		return v.Err()
	}
	// Close waits for what follows: the party's key is in or out of the
	// barrier before it returns.
	defer v.endAcquisition()
	key := v.name + "/dbarrier." + strconv.FormatInt(v.s.id, 10) + "." + strconv.FormatUint(v.s.enqueues.Add(1), 10)
	wake, stop, err := d.listen(key)
	if err != nil {
		return err
	}
	defer stop()
	// The script runs on a helper (see request): its caller leaves once
	// ctx ends (or the party does), and the party is taken out when its
	// answer comes.
	res, left, err := request(v.s, &v.requests, ctx, v.Done(), func() ([]string, error) {
		// As for an enqueue, the outcome must be known to withdraw: ctx
		// does not cut the script short.
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		return dbEnterScript.Run(opCtx, v.s.asked, d.keys(key), d.count, key, v.s.ttl.Milliseconds(), v.wake).StringSlice()
	}, func([]string, error) { d.withdrawNow(key) })
	if left {
		d.abandon(key)
		if cerr := ctx.Err(); cerr != nil {
			return v.errf("enter: %w", cerr)
		}
		return v.Err()
	}
	if err == nil && len(res) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		// The script may have run, counted this party in and completed
		// the round: then the party is in.
		if v.Err() == nil {
			if round, in := d.giveUp(key); in {
				d.entered, d.key, d.round = true, key, round
				return nil
			}
		} else {
			d.withdraw(key)
		}
		if cerr := ctxtime.Ended(ctx); cerr != nil {
			return v.errf("enter: %w (%v)", cerr, err)
		}
		if verr := v.Err(); verr != nil { // closed, or its session ended
			return v.errf("enter: %w (%v)", verr, err)
		}
		return v.errf("enter: %w", err)
	}
	switch res[0] {
	case "-1":
		d.forget(key)
		return v.sessionGone()
	case "-2":
		d.forget(key)
		return v.errf("%d parties entered: %w", d.count, barrier.ErrFull)
	case "-4":
		d.forget(key)
		return v.errf("count %d, but the barrier's parties were given %s: %w", d.count, res[1], primitives.ErrInvalidArgument)
	}
	round := res[1]
	if res[0] != "1" {
		// A look its caller left takes the party out when it is answered:
		// the caller has returned an error.
		left, err := d.await(ctx, "enter", wake, func(ctx context.Context) (bool, error) {
			n, err := dbCheckScript.Run(ctx, v.s.asked, d.keys(key), round).Int64()
			switch {
			case err != nil:
				return false, err
			case n == -1:
				return true, v.sessionGone()
			case n == -3:
				return true, v.errf("party key %s deleted: %w", key, primitives.ErrLost)
			}
			return n == 1, nil
		}, func() { d.withdrawNow(key) })
		if err != nil {
			if left {
				d.abandon(key)
				return err
			}
			if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) && v.Err() == nil {
				// It gave up: out, unless its round is complete by now.
				if round, in := d.giveUp(key); in {
					d.entered, d.key, d.round = true, key, round
					return nil
				}
				return err
			}
			d.withdraw(key)
			return err
		}
	}
	d.entered, d.key, d.round = true, key, round
	return nil
}

// Leave takes this party's key out and waits until every party of its
// round has left or is gone. If ctx ends first it returns ctx.Err(); the
// party stays out and a later Leave waits again.
func (d *doubleBarrier) Leave(ctx context.Context) error {
	return ctxtime.Alone(ctx, d.leave(ctx)) // ctx.Err() itself, as barrier.DoubleBarrier promises
}

func (d *doubleBarrier) leave(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.usable(ctx, "leave"); err != nil {
		return err
	}
	if !d.entered {
		return d.v.errf("%w", barrier.ErrNotEntered)
	}
	v := d.v
	wake, stop, err := d.listen("")
	if err != nil {
		return err
	}
	defer stop()
	// A look runs on a helper (see request), and may do so after its
	// caller left it: it reads no field of d.
	key, round := d.key, d.round
	look := func(ctx context.Context) (bool, error) {
		n, err := dbLeaveScript.Run(ctx, v.s.asked, []string{v.granted, v.queue, key}, round, v.wake).Int64()
		if err == nil {
			d.forget(key) // out: the session refreshes it no more
		}
		return n == 1, err
	}
	if _, err := d.await(ctx, "leave", wake, look, func() {}); err != nil {
		return err
	}
	d.entered, d.key, d.round = false, "", ""
	return nil
}

// usable is the party's Usable, its context's error (a nil context's
// included) prefixed with the party's name and what, the call.
func (d *doubleBarrier) usable(ctx context.Context, what string) error {
	if err := driver.ContextErr(ctx); err != nil {
		return d.v.errf("%s: %w", what, err)
	}
	return d.v.Err()
}

// listen registers a wake for the party's waits and, if key is not "",
// key as the party's (refreshed with the session, taken out at its end).
// stop unregisters the wake.
func (d *doubleBarrier) listen(key string) (wake chan struct{}, stop func(), err error) {
	v := d.v
	wake = make(chan struct{}, 1)
	if _, err := loopCall(v.s, context.Background(), func() (struct{}, error) {
		if v.Ended() {
			return struct{}{}, v.Err()
		}
		v.listeners[wake] = struct{}{}
		if key != "" {
			v.waiting[key] = nil
		}
		return struct{}{}, nil
	}); err != nil {
		return nil, nil, err
	}
	return wake, func() { v.s.mb.Post(func() { delete(v.listeners, wake) }) }, nil
}

// await calls look at once and again at every wake message and every
// re-check interval until it says done, ctx ends (an error wrapping
// ctx.Err(), prefixed with the party's name and what, the call) or the
// party ends (its Err). An error of look that is not done is transient.
// Each look runs on a helper (see request): left reports that await
// returned leaving one under way, which calls undo when answered.
func (d *doubleBarrier) await(ctx context.Context, what string, wake <-chan struct{}, look func(context.Context) (bool, error), undo func()) (left bool, err error) {
	v := d.v
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-wake:
		case <-t.C:
			if !first { // the first look, at once, is no re-check
				v.rechecked()
			}
		case <-ctx.Done():
			return false, v.errf("%s: %w", what, ctx.Err())
		case <-v.Done():
			return false, v.Err()
		}
		t.Reset(v.nextLook(0))
		done, left, err := request(v.s, &v.requests, ctx, v.Done(), func() (bool, error) {
			lctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			return look(lctx)
		}, func(bool, error) { undo() })
		if left {
			if cerr := ctx.Err(); cerr != nil {
				return true, v.errf("%s: %w", what, cerr)
			}
			return true, v.Err()
		}
		if done {
			return false, err
		}
		if err != nil {
			if cerr := ctxtime.Ended(ctx); cerr != nil {
				return false, v.errf("%s: %w (%v)", what, cerr, err)
			}
			v.s.log.Debug("redisio: double barrier look", zap.String("name", v.name), zap.Error(err))
		}
	}
}

// giveUp takes the party's key out of the barrier as its Enter gives up,
// and forgets it, unless its round is complete (see dbWithdrawScript):
// then it returns the round, and the key stays the party's. It waits up
// to leaveGrace for the answer (see leaving); a withdrawal it leaves
// takes the party out whatever its round when answered: the caller
// returns an error.
func (d *doubleBarrier) giveUp(key string) (round string, in bool) {
	v := d.v
	res, left, err := leaving(v.s, &v.requests, func() ([]string, error) {
		ctx, cancel := v.s.ownCtx(context.Background(), opTimeout)
		defer cancel()
		return ownScript(ctx, v.s, dbWithdrawScript, []string{v.granted, v.queue, key}, v.wake).StringSlice()
	}, func([]string, error) { d.withdrawNow(key) })
	if left {
		d.abandon(key)
		return "", false
	}
	if err == nil && len(res) == 2 && res[0] == "1" {
		return res[1], true
	}
	if err != nil {
		v.s.log.Debug("redisio: double barrier withdraw", zap.String("key", key), zap.Error(err))
	}
	d.forget(key)
	return "", false
}

// abandon takes the party's key out as its Enter returns an error
// leaving a request under way (see service.abandon).
func (d *doubleBarrier) abandon(key string) { d.v.abandon(func() { d.withdrawNow(key) }) }

// withdraw is withdrawNow on a helper, waiting up to leaveGrace for it
// (see Session.settle).
func (d *doubleBarrier) withdraw(key string) {
	d.v.s.settle(&d.v.requests, func() { d.withdrawNow(key) })
}

// withdrawNow takes the party's key out of the barrier, whatever its
// round, and forgets it: the party is gone (its service ended, its
// session or key lost, or its caller left).
func (d *doubleBarrier) withdrawNow(key string) {
	ctx, cancel := d.v.s.ownCtx(context.Background(), opTimeout)
	defer cancel()
	if _, err := d.v.s.releaseOwn(ctx, nil, d.v.ref(key), time.Time{}); err != nil {
		d.v.s.log.Debug("redisio: double barrier withdraw", zap.String("key", key), zap.Error(err))
	}
	d.forget(key)
}

// forget drops key from the party's keys.
func (d *doubleBarrier) forget(key string) {
	v := d.v
	v.s.mb.Post(func() { delete(v.waiting, key) })
}
