package k8sio

import (
	"context"
	"errors"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/driver"
)

// The session's loop owns the state and never waits on the API server:
// every request runs on a helper the session counts, bounded by its
// context, and its answer is posted back to the loop, which applies it.
// The requests of one election run one sequence at a time (serially), in
// the order they were asked for, so that a take and a resign, or a resign
// and a Proclaim, never race; those of different elections, and the
// renewals of different Leases, run side by side.

// request runs req on a helper, bounded by ctx (cancel, if not nil, once
// req has returned), and has the loop apply its result. If the loop has
// stopped, apply never runs and stopped (if not nil) runs on the helper
// instead. Loop only.
func request[T any](s *Session, ctx context.Context, cancel context.CancelFunc, req func(context.Context) (T, error), apply func(T, error), stopped func()) {
	s.goHelper(func() {
		r, err := req(ctx)
		if cancel != nil {
			cancel()
		}
		if !s.mb.Post(func() { apply(r, err) }) && stopped != nil {
			stopped()
		}
	})
}

// serially runs op, which starts one sequence of the service's requests,
// once no other sequence of the service is under way: at once if none is,
// else after those asked for before. The sequence's end calls v.finished
// (op calls it at once if it sends nothing). Every op first checks whether
// the service has ended (or closes), and then sends nothing. Loop only.
func (v *service) serially(op func()) {
	if v.busy {
		v.queue = append(v.queue, op)
		return
	}
	v.busy = true
	op()
}

// finished ends the service's sequence under way and starts the next one
// waiting, if any. Loop only.
func (v *service) finished() {
	v.busy = false
	if len(v.queue) > 0 {
		op := v.queue[0]
		v.queue = v.queue[1:]
		v.busy = true
		op()
	}
}

// callSerially runs op serially on the loop for a caller that waits for
// its answer as actor.Call does: op answers the Reply (and calls
// v.finished) once its sequence is over. A call whose ctx has ended, or
// that reaches a service that has ended or closes, is answered at once
// and sends nothing.
func callSerially[T any](v *service, ctx context.Context, op func(actor.Reply[T])) (T, error) {
	res, err := actor.Call(ctx, v.Done(), func(r actor.Reply[T]) bool {
		return v.s.mb.Post(func() {
			v.serially(func() {
				var zero T
				if err := v.gone(); err != nil {
					r.Answer(zero, err)
					v.finished()
					return
				}
				if err := r.Context().Err(); err != nil {
					// Given up while the service's earlier requests were
					// under way: changes nothing.
					r.Answer(zero, err)
					v.finished()
					return
				}
				op(r)
			})
		})
	})
	if errors.Is(err, actor.ErrStopped) {
		if serr := v.Err(); serr != nil {
			return res, serr
		}
	}
	return res, err
}

// gone is the error a new request of the service fails with, nil while it
// may make one: the service's Err once it has ended, its Close's while it
// closes. Loop only.
func (v *service) gone() error {
	if v.Ended() {
		return v.Err()
	}
	if v.closing {
		return v.closeErr
	}
	return nil
}

// seen is a state of the Lease a sequence of requests saw off the loop,
// for the loop to record: the Lease l (nil: absent) at rv; or, with stale
// set, that the state the loop knew at that version is stale (a write on
// it conflicted).
type seen struct {
	l     *coordinationv1.Lease
	rv    string
	stale fencing.Token
}

// saw records, in order, what a sequence of requests saw. Loop only.
func (v *service) saw(ss []seen) {
	for _, s := range ss {
		if s.stale != 0 {
			// Stale unless the loop knows a later state meanwhile. curRV
			// stays, so that, should the next read fail, no state older
			// than cur (a watch event still queued) is taken for the
			// Lease's meanwhile.
			if v.cur != nil && v.curRV == s.stale {
				v.cur = nil
			}
			continue
		}
		v.observed(s.l, s.rv)
	}
}

// writeTerm writes f(cur) for the term h, cur being the Lease as last
// known (nil: not known), reading the Lease again when cur is not the
// term's or the write conflicts. It returns what it saw, the Lease as it
// knows it at the end, and nil once written; errGone if the Lease is no
// longer the term's. Off the loop.
func (v *service) writeTerm(ctx context.Context, cur *coordinationv1.Lease, h driver.Hold, f func(*coordinationv1.Lease) *coordinationv1.Lease) ([]seen, *coordinationv1.Lease, error) {
	var ss []seen
	for range 3 {
		if !v.mine(cur, &h) {
			l, rv, err := v.read(ctx)
			if err != nil {
				return ss, cur, err
			}
			ss, cur = append(ss, seen{l: l, rv: rv}), l
			if !v.mine(cur, &h) {
				return ss, cur, errGone
			}
		}
		upd, err := v.leases.Update(ctx, f(cur), metav1.UpdateOptions{})
		switch {
		case err == nil:
			return append(ss, seen{l: upd, rv: upd.ResourceVersion}), upd, nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			if tok, perr := parseRV(cur.ResourceVersion); perr == nil {
				ss = append(ss, seen{stale: tok})
			}
			cur = nil
		default:
			return ss, cur, err
		}
	}
	return ss, cur, fmt.Errorf("%s: the Lease keeps changing", v.Spec().Name)
}

// write runs writeTerm for h on a helper, bounded by ctx (cancelled
// after), from the Lease as the loop knows it now; then the loop records
// what it saw and calls then with its error. Loop only.
func (v *service) write(ctx context.Context, cancel context.CancelFunc, h driver.Hold, f func(*coordinationv1.Lease) *coordinationv1.Lease, then func(error)) {
	cur := v.cur
	request(v.s, ctx, cancel, func(ctx context.Context) ([]seen, error) {
		ss, _, err := v.writeTerm(ctx, cur, h, f)
		return ss, err
	}, func(ss []seen, err error) {
		v.saw(ss)
		then(err)
	}, nil)
}
