package redisio

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// A script that changes a hold (an enqueue, a release) is sent at most
// once per attempt: go-redis would send it again on a fresh connection when
// the first one's reply did not come back (its MaxRetries), and a script
// run twice blindly queues a second hold, or finds its own release done
// and reports a loss. redisio repeats such a script itself, knowing what
// the attempt whose reply it lost may have done: a repeated enqueue first
// looks for the hold an earlier attempt queued (by its nonce) and keeps
// it; a repeated release that finds the hold gone counts it released.
// A barrier's Release is sent once and repeated the same way. Scripts
// that answer a second run as they did the first (a waiter's check, a
// refresh, a barrier's Hold, a double barrier's Enter) keep go-redis's own
// resends.

// onceCmd is a command go-redis sends at most once.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to send the command again once written.
func (onceCmd) NoRetry() bool { return true }

// onceScripter runs scripts (redis.Script's Run) on cli, each command sent
// at most once; loading a script and the read-only forms go as usual.
type onceScripter struct{ cli *redis.Client }

func (o onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "eval", script, keys, args)
}

func (o onceScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.send(ctx, "evalsha", sha1, keys, args)
}

func (o onceScripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return o.cli.EvalRO(ctx, script, keys, args...)
}

func (o onceScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return o.cli.EvalShaRO(ctx, sha1, keys, args...)
}

func (o onceScripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return o.cli.ScriptExists(ctx, hashes...)
}

func (o onceScripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return o.cli.ScriptLoad(ctx, script)
}

// send makes the command name payload numkeys keys... args... and runs it
// once.
func (o onceScripter) send(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := redis.NewCmd(ctx, append(a, args...)...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = o.cli.Process(ctx, onceCmd{cmd})
	return cmd
}

// inAttempts makes the request req until it is answered: after a failure
// another attempt may not meet (see retriable) it makes another, after a
// growing pause, until ctx ends or stop is closed. repeated reports that
// an attempt failed before the answer (it may still have run in Redis).
func inAttempts[R any](ctx context.Context, stop <-chan struct{}, req func() (R, error)) (resp R, repeated bool, err error) {
	pause := 20 * time.Millisecond
	for {
		resp, err = req()
		if err == nil || ctx.Err() != nil || !retriable(err) {
			return resp, repeated, err
		}
		repeated = true
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return resp, repeated, err
		case <-stop:
			t.Stop()
			return resp, repeated, err
		}
		pause = min(2*pause, time.Second)
	}
}

// retriable reports whether err is a failure of one request that another
// attempt may not meet: the connection broke or its read timed out, no
// connection was free in time, or Redis refused the request for now (it
// is loading its data, is a replica or lost its primary, or runs a script
// too long). A closed client, a context's end and the scripts' own errors
// are not.
func retriable(err error) bool {
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrClosed):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrPoolTimeout):
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN", "BUSY "} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
