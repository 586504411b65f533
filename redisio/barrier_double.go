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
	left    bool       // Leave took the party's key out; it waits for the others
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
// before it returns ctx.Err() (or the error), unless its round is
// complete by then: the others may have passed counting it, so it is in,
// and Enter returns nil. Redis runs the count and the taking out one at a
// time: a party taken out is never counted.
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

// Enter counts this party in and waits until count parties have entered.
func (d *doubleBarrier) Enter(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.v.Usable(ctx); err != nil {
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
	// As for an enqueue, the outcome must be known to withdraw: ctx does
	// not cut the script short.
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	res, err := dbEnterScript.Run(opCtx, v.s.cli, d.keys(key), d.count, key, v.s.ttl.Milliseconds(), v.wake).StringSlice()
	cancel()
	if err == nil && len(res) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		// The script may have run, counted this party in and completed
		// the round: then the party is in.
		if v.Err() == nil {
			if round, in := d.giveUp(key); in {
				d.entered, d.left, d.key, d.round = true, false, key, round
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
		if err := d.await(ctx, wake, func(ctx context.Context) (bool, error) {
			n, err := dbCheckScript.Run(ctx, v.s.cli, d.keys(key), round).Int64()
			switch {
			case err != nil:
				return false, err
			case n == -1:
				return true, v.sessionGone()
			case n == -3:
				return true, v.errf("party key %s deleted: %w", key, primitives.ErrLost)
			}
			return n == 1, nil
		}); err != nil {
			if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) && v.Err() == nil {
				// It gave up: out, unless its round is complete by now.
				if round, in := d.giveUp(key); in {
					d.entered, d.left, d.key, d.round = true, false, key, round
					return nil
				}
				return err
			}
			d.withdraw(key)
			return err
		}
	}
	d.entered, d.left, d.key, d.round = true, false, key, round
	return nil
}

// Leave takes this party's key out and waits until every party of its
// round has left or is gone. If ctx ends first the party stays out and a
// later Leave waits again.
func (d *doubleBarrier) Leave(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.v.Usable(ctx); err != nil {
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
	look := func(ctx context.Context) (bool, error) {
		n, err := dbLeaveScript.Run(ctx, v.s.cli, []string{v.granted, v.queue, d.key}, d.round, v.wake).Int64()
		if err == nil && !d.left {
			d.left = true
			d.forget(d.key)
		}
		return n == 1, err
	}
	if err := d.await(ctx, wake, look); err != nil {
		return err
	}
	d.entered, d.left, d.key, d.round = false, false, "", ""
	return nil
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
// re-check interval until it says done, ctx ends (ctx.Err()) or the party
// ends (its Err). An error of look that is not done is transient.
func (d *doubleBarrier) await(ctx context.Context, wake <-chan struct{}, look func(context.Context) (bool, error)) error {
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
			return ctx.Err()
		case <-v.Done():
			return v.Err()
		}
		t.Reset(v.nextLook(0))
		lctx, cancel := context.WithTimeout(ctx, opTimeout)
		done, err := look(lctx)
		cancel()
		if done {
			return err
		}
		if err != nil {
			if cerr := ctxtime.Ended(ctx); cerr != nil {
				return cerr
			}
			v.s.log.Debug("redisio: double barrier look", zap.String("name", v.name), zap.Error(err))
		}
	}
}

// giveUp takes the party's key out of the barrier as its Enter gives up,
// and forgets it, unless its round is complete (see dbWithdrawScript):
// then it returns the round, and the key stays the party's.
func (d *doubleBarrier) giveUp(key string) (round string, in bool) {
	v := d.v
	ctx, cancel := v.s.ownCtx(context.Background(), opTimeout)
	defer cancel()
	res, err := ownScript(ctx, v.s, dbWithdrawScript, []string{v.granted, v.queue, key}, v.wake).StringSlice()
	if err == nil && len(res) == 2 && res[0] == "1" {
		return res[1], true
	}
	if err != nil {
		v.s.log.Debug("redisio: double barrier withdraw", zap.String("key", key), zap.Error(err))
	}
	d.forget(key)
	return "", false
}

// withdraw takes the party's key out of the barrier, whatever its round,
// and forgets it: the party is gone (its service ended, its session or
// key lost).
func (d *doubleBarrier) withdraw(key string) {
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
