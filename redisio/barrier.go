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
	cli  *redis.Client
	key  string // name/barrier
	wake string // name/barrier.wake
	name string
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
	return &redisBarrier{cli: cli, key: name + "/barrier", wake: name + "/barrier.wake", name: fmt.Sprintf("redisio: barrier %q", name)}, nil
}

// fail says why a request made under ctx failed: ctx's end if it ended,
// else err.
func (b *redisBarrier) fail(ctx context.Context, what string, err error) error {
	if cerr := ctxtime.Ended(ctx); cerr != nil {
		return fmt.Errorf("%s: %s: %w", b.name, what, cerr)
	}
	return fmt.Errorf("%s: %s: %w", b.name, what, err)
}

// Hold creates the barrier's key if it does not exist; barrier.ErrHeld if
// it does.
func (b *redisBarrier) Hold(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("%s: hold: %w", b.name, err)
	}
	n, err := barrierHoldScript.Run(ctx, b.cli, []string{b.key}, rand.Text()).Int64()
	if err != nil {
		return b.fail(ctx, "hold", err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", b.name, barrier.ErrHeld)
	}
	return nil
}

// Release deletes the barrier's key and wakes every Wait;
// barrier.ErrNotHeld if there was no key. Its script is sent once and
// repeated by Release (see inAttempts) while ctx lives, for at most
// opTimeout after the first attempt (a barrier has no session to end the
// repeats): a repeat that finds no key follows one whose reply was lost,
// which may have deleted it, and counts as released.
func (b *redisBarrier) Release(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("%s: release: %w", b.name, err)
	}
	repeats, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	n, repeated, err := inAttempts(repeats, nil, func() (int64, error) {
		return barrierReleaseScript.Run(repeats, onceScripter{b.cli}, []string{b.key}, b.wake).Int64()
	})
	if err != nil {
		return b.fail(ctx, "release", err)
	}
	if n == 0 && !repeated {
		return fmt.Errorf("%s: %w", b.name, barrier.ErrNotHeld)
	}
	return nil
}

// Wait returns once the barrier's key is absent, or once a Release's
// message arrives (even if the barrier was held again since: Release lets
// a Wait under way return, unless its subscription was being re-made
// across the Release and the next Hold); ctx.Err() (wrapped) if ctx ends
// first.
func (b *redisBarrier) Wait(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("%s: wait: %w", b.name, err)
	}
	if held, err := b.held(ctx); err != nil || !held {
		return err
	}
	ps := b.cli.Subscribe(ctx, b.wake)
	defer ps.Close()
	// The subscription is in place once confirmed; a Release after it is
	// heard, one before it is seen by the look that follows.
	if _, err := ps.Receive(ctx); err != nil {
		return b.fail(ctx, "subscribe", err)
	}
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
	n, err := b.cli.Exists(ctx, b.key).Result()
	if err != nil {
		return false, b.fail(ctx, "wait", err)
	}
	return n == 1, nil
}
