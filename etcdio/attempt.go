package etcdio

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/internal/ctxtime"
)

// Every request a session makes on its own behalf (a key's write, a look,
// a delete, a lease check) is made in attempts, each bounded, so that a
// member that stopped answering is given up for another of the client's
// members. The bound follows the store: it starts at requestTimeout,
// doubles (up to maxRequestTimeout) whenever an attempt runs out of it, and
// after an attempt that succeeds it is twice that attempt's time, and at
// least requestTimeout. A store that answers, however slowly, is therefore
// waited for rather than given up on and asked again forever.

// maxRequestTimeout caps the bound of one attempt.
const maxRequestTimeout = 4 * requestTimeout

// attemptBound is the bound of a session's next attempt. Safe for
// concurrent use.
type attemptBound struct{ d atomic.Int64 }

// get returns the current bound.
func (b *attemptBound) get() time.Duration {
	if d := time.Duration(b.d.Load()); d > 0 {
		return d
	}
	return requestTimeout
}

// ranOut records that an attempt bounded by d ran out of it.
func (b *attemptBound) ranOut(d time.Duration) {
	next := min(2*d, maxRequestTimeout)
	for {
		cur := b.d.Load()
		if time.Duration(cur) >= next || b.d.CompareAndSwap(cur, int64(next)) {
			return
		}
	}
}

// answered records an attempt that succeeded after took.
func (b *attemptBound) answered(took time.Duration) {
	b.d.Store(int64(min(max(2*took, requestTimeout), maxRequestTimeout)))
}

// attempt returns the context of one attempt under parent, bounded by the
// session's current bound, and the function to call with the attempt's
// error once it is over (it also releases the context).
func (s *Session) attempt(parent context.Context) (context.Context, func(error)) {
	d, start := s.bound.get(), time.Now()
	ctx, cancel := context.WithTimeout(parent, d)
	return ctx, func(err error) {
		switch {
		case err == nil:
			s.bound.answered(time.Since(start))
		case parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
			s.bound.ranOut(d)
		}
		cancel()
	}
}

// inAttempts makes the request req in attempts (see attempt) until one is
// answered: after an attempt that failed in a way another may not meet (see
// retriable) it makes another, after a growing pause, while ctx and s
// live. req must be safe to repeat, since an attempt given up may still
// land; repeated reports that one was given up before the answer.
func inAttempts[R any](s *Session, ctx context.Context, req func(context.Context) (R, error)) (resp R, repeated bool, err error) {
	backoff := ctxtime.NewBackoff(50*time.Millisecond, time.Second)
	for {
		actx, done := s.attempt(ctx)
		resp, err = req(actx)
		done(err)
		if err == nil || ctx.Err() != nil || s.ctx.Err() != nil || !retriable(err) {
			return resp, repeated, err
		}
		repeated = true
		backoff.Wait(ctx)
	}
}

// txn commits If(cmps).Then(then).Else(els) in attempts (see inAttempts);
// repeated says an earlier attempt was given up.
func (s *Session) txn(ctx context.Context, cmps []clientv3.Cmp, then []clientv3.Op, els ...clientv3.Op) (resp *clientv3.TxnResponse, repeated bool, err error) {
	return inAttempts(s, ctx, func(actx context.Context) (*clientv3.TxnResponse, error) {
		return s.cli.Txn(actx).If(cmps...).Then(then...).Else(els...).Commit()
	})
}

// get reads key with opts in attempts (see inAttempts).
func (s *Session) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, _, err := inAttempts(s, ctx, func(actx context.Context) (*clientv3.GetResponse, error) {
		return s.cli.Get(actx, key, opts...)
	})
	return resp, err
}

// retriable reports whether err is a failure of one request that another
// attempt may not meet: the connection broke, or etcd gave the request up
// for now (its own request timeout, a leader change, no leader: all
// Unavailable, which the client returns as an rpctypes.EtcdError; or "too
// many requests", shed because applying lags committing), or the member did
// not answer within the request's own bound (its deadline, not the
// caller's: the caller checks its own ctx first). "Database space
// exceeded", which shares the shed answer's code, needs an operator and is
// not retried.
func retriable(err error) bool {
	if errors.Is(err, rpctypes.ErrTooManyRequests) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded ||
		errors.Is(err, context.DeadlineExceeded)
}
