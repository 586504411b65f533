package redisio

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
)

// barrierRecheck is how often a Wait looks at the barrier's key again when
// no message came: the bound on a message missed around a reconnect, and
// on a barrier deleted by something other than Release.
const barrierRecheck = time.Second

// redisBarrier is barrier.Barrier on Redis: see NewBarrier.
type redisBarrier struct {
	cli *redis.Client
	// asked is the client of its requests: cli if its read and write
	// timeouts are at most opTimeout, else a clone of it bounded by
	// opTimeout, so that a request its caller left (see request) ends
	// within opTimeout.
	asked *redis.Client
	key   string // name/barrier
	wake  string // name/barrier.wake
	name  string
}

var _ barrier.Barrier = (*redisBarrier)(nil)

// NewBarrier returns the barrier name on cli: held while its key
// name/barrier exists. The key has no expiry and belongs to no session: the
// barrier outlives whoever held it, and anyone may release it. Hold is
// SET NX; Release deletes the key and publishes on the name's channel
// name/barrier.wake in one script. Wait returns at once if the key is
// absent; otherwise it subscribes to the channel on a pub/sub connection of
// its own (opened for that Wait and closed when it returns) and looks again
// at each message, and at least every second for a message missed around
// a reconnect. Wait writes nothing, so a Wait that gives up leaves nothing
// behind. The keys are the name's own and no lock, rwlock, election or
// double barrier's on the same name.
//
// A barrier has no session, so WithSession, WithTTL and WithSuspendAfter
// are refused; the other options have no effect on it. Bad input (nil
// client, a name NewLock refuses, a bad option) is an error wrapping
// primitives.ErrInvalidArgument. The caller owns cli.
func NewBarrier(cli *redis.Client, name string, opts ...Option) (barrier.Barrier, error) {
	if cli == nil {
		return nil, fmt.Errorf("redisio: barrier: nil client: %w", primitives.ErrInvalidArgument)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.session != nil || o.TTLSet || o.SuspendSet {
		return nil, fmt.Errorf("redisio: barrier %q: WithSession, WithTTL and WithSuspendAfter: a barrier has no session: %w", name, primitives.ErrInvalidArgument)
	}
	return &redisBarrier{cli: cli, asked: withTimeoutAtMost(cli, opTimeout), key: name + "/barrier", wake: name + "/barrier.wake", name: fmt.Sprintf("redisio: barrier %q", name)}, nil
}

// fail says why a request made under ctx failed: ctx's end if it ended,
// else err.
func (b *redisBarrier) fail(ctx context.Context, what string, err error) error {
	if cerr := ctxtime.Ended(ctx); cerr != nil {
		return fmt.Errorf("%s: %s: %w", b.name, what, cerr)
	}
	return fmt.Errorf("%s: %s: %w", b.name, what, err)
}

// looseHelpers runs a barrier's requests (see request) each on a
// goroutine of its own: a barrier has no session, nor a Close to wait for
// them. Each ends with its request and its undo, neither of which begins
// an attempt more than opTimeout after it began, each attempt bounded by
// opTimeout (see asked).
type looseHelpers struct{}

func (looseHelpers) goTracked(f func()) bool { go f(); return true }

// closedErr is never asked for: goTracked runs every f.
func (looseHelpers) closedErr() error { return nil }

// ask makes req on behalf of a caller whose context is ctx (see request);
// undo gets its answer if the caller left it, and the caller gets an
// error wrapping ctx's.
func ask[R any](b *redisBarrier, ctx context.Context, what string, req func() (R, error), undo func(R, error)) (R, error) {
	r, left, err := request(looseHelpers{}, nil, ctx, nil, req, undo)
	if left {
		return r, fmt.Errorf("%s: %s: %w", b.name, what, ctx.Err())
	}
	if err != nil {
		return r, b.fail(ctx, what, err)
	}
	return r, nil
}

// Hold creates the barrier's key if it does not exist; barrier.ErrHeld if
// it does. A Hold that returns an error leaves the barrier as it found
// it: it deletes the key if its script created it (its reply lost), and
// if its caller left its script under way (see request), at once and
// again once Redis answers.
func (b *redisBarrier) Hold(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("%s: hold: %w", b.name, err)
	}
	id := rand.Text()
	n, err := ask(b, ctx, "hold", func() (int64, error) {
		// The outcome must be known to undo it: ctx does not cut the
		// script short.
		opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
		defer cancel()
		return barrierHoldScript.Run(opCtx, b.asked, []string{b.key}, id).Int64()
	}, func(int64, error) { b.unhold(id) })
	if err != nil {
		// The script may have run, its reply lost (or held: the request
		// left deletes the key again when answered): the key is deleted
		// if it is this Hold's before the caller learns the error, or
		// within leaveGrace (see leaving).
		_, _, _ = leaving(looseHelpers{}, nil, func() (struct{}, error) {
			b.unhold(id)
			return struct{}{}, nil
		}, func(struct{}, error) {})
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", b.name, barrier.ErrHeld)
	}
	return nil
}

// unhold deletes the barrier's key if it is the Hold id's, and wakes
// every Wait, in attempts for at most opTimeout.
func (b *redisBarrier) unhold(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, _, _ = inAttempts(ctx, nil, func() (int64, error) {
		return barrierUnholdScript.Run(ctx, b.asked, []string{b.key}, id, b.wake).Int64()
	})
}

// Release deletes the barrier's key and wakes every Wait;
// barrier.ErrNotHeld if there was no key. Its script is sent once and
// repeated by Release (see inAttempts) while ctx lives, for at most
// opTimeout after the first attempt (a barrier has no session to end the
// repeats): a repeat that finds no key follows one whose reply was lost,
// which may have deleted it, and counts as released. A Release whose
// caller left its script under way (see request) may still release the
// barrier when Redis runs it, as the Release asked.
func (b *redisBarrier) Release(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("%s: release: %w", b.name, err)
	}
	type released struct {
		n        int64
		repeated bool
	}
	r, err := ask(b, ctx, "release", func() (released, error) {
		repeats, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		n, repeated, err := inAttempts(repeats, nil, func() (int64, error) {
			return barrierReleaseScript.Run(repeats, onceScripter{b.asked}, []string{b.key}, b.wake).Int64()
		})
		return released{n, repeated}, err
	}, func(released, error) {})
	if err != nil {
		return err
	}
	if r.n == 0 && !r.repeated {
		return fmt.Errorf("%s: %w", b.name, barrier.ErrNotHeld)
	}
	return nil
}

// Wait returns once the barrier's key is absent, or once a Release's
// message arrives (even if the barrier was held again since: Release lets
// a Wait under way return, unless its subscription was being re-made
// across the Release and the next Hold); ctx.Err() if ctx ends first.
func (b *redisBarrier) Wait(ctx context.Context) error {
	return ctxtime.Alone(ctx, b.wait(ctx)) // ctx.Err() itself, as barrier.Barrier promises
}

func (b *redisBarrier) wait(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("%s: wait: %w", b.name, err)
	}
	if held, err := b.held(ctx); err != nil || !held {
		return err
	}
	// The subscription is in place once confirmed; a Release after it is
	// heard, one before it is seen by the look that follows. Opening its
	// connection waits for Redis's answer too: both run on a helper, and
	// a subscription its caller left is closed once confirmed.
	ps, err := ask(b, ctx, "subscribe", func() (*redis.PubSub, error) {
		ps := b.cli.Subscribe(ctx, b.wake)
		if _, err := ps.ReceiveTimeout(ctx, opTimeout); err != nil {
			ps.Close()
			return nil, err
		}
		return ps, nil
	}, func(ps *redis.PubSub, _ error) {
		if ps != nil {
			ps.Close()
		}
	})
	if err != nil {
		return err
	}
	defer ps.Close()
	msgs := ps.Channel()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case _, ok := <-msgs:
			if ok {
				return nil // released while this Wait was under way
			}
			msgs = nil // closed: the re-check alone is left
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%s: wait: %w", b.name, ctx.Err())
		}
		t.Reset(barrierRecheck)
		held, err := b.held(ctx)
		if err != nil {
			if cerr := ctxtime.Ended(ctx); cerr != nil {
				return err
			}
			continue // transient: the next message or re-check looks again
		}
		if !held {
			return nil
		}
	}
}

// held reports whether the barrier's key exists.
func (b *redisBarrier) held(ctx context.Context) (bool, error) {
	return ask(b, ctx, "wait", func() (bool, error) {
		n, err := b.asked.Exists(ctx, b.key).Result()
		return n == 1, err
	}, func(bool, error) {})
}
