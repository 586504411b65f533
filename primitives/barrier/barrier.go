// Package barrier defines two barriers, independent of any backend:
// Barrier, which one party holds while others wait for its release, and
// DoubleBarrier, which a fixed number of parties enter together and leave
// together. Backends provide them (each backend's NewBarrier and
// NewDoubleBarrier), in the layouts of their stores' own recipes.
//
// Barriers carry no fencing tokens: they order the phases of a job, they
// do not grant exclusive access to anything.
//
//	b, err := etcdio.NewBarrier(cli, "/barriers/nightly") // or zkio's, redisio's, memio's
//	err = b.Hold(ctx)     // the coordinator: everyone waits
//	err = b.Wait(ctx)     // a worker: returns once the barrier is released
//	err = b.Release(ctx)  // the coordinator: let them go
//
//	d, err := etcdio.NewDoubleBarrier(cli, "/barriers/batch", 5)
//	err = d.Enter(ctx) // returns when all five have entered
//	err = d.Leave(ctx) // returns when all five have left
package barrier

import (
	"context"
	"errors"
)

var (
	// ErrHeld is returned by Hold when the barrier is held already.
	ErrHeld = errors.New("barrier: already held")
	// ErrNotHeld is returned by Release when the barrier is not held.
	ErrNotHeld = errors.New("barrier: not held")
	// ErrFull is returned by Enter when the double barrier's count of
	// parties have entered already; the caller is not counted.
	ErrFull = errors.New("barrier: full")
	// ErrEntered is returned by Enter when this party has entered already.
	ErrEntered = errors.New("barrier: already entered")
	// ErrNotEntered is returned by Leave when this party has not entered.
	ErrNotEntered = errors.New("barrier: not entered")
)

// Barrier blocks parties in Wait while it is held.
//
// The barrier is a state, not an owner's hold: it outlives whoever held it,
// and anyone may Release it. A holder that dies leaves it held until someone
// releases it.
type Barrier interface {
	// Hold raises the barrier: Waits block until Release. ErrHeld if it
	// is held already (by anyone).
	Hold(ctx context.Context) error
	// Release lowers the barrier and lets every Wait return. ErrNotHeld if
	// it is not held, so a retried Release is safe and says so.
	Release(ctx context.Context) error
	// Wait blocks until the barrier is not held; at once if it is not held
	// now. If ctx ends first it returns ctx.Err().
	Wait(ctx context.Context) error
}

// DoubleBarrier lets Count parties start together (Enter) and finish
// together (Leave). Each party is one DoubleBarrier value with its own
// session: a party whose session is lost is out of the barrier, and the
// others do not wait for it to leave.
type DoubleBarrier interface {
	// Enter counts this party in and blocks until Count parties have
	// entered. ErrFull if Count have entered already. If ctx ends first it
	// returns ctx.Err() and this party is not counted, with one exception
	// a store that does not answer forces: an Enter that gives up while
	// its write's answer has not come cannot learn in time whether the
	// others counted it, and they may pass the barrier counting it (the
	// backends' docs say when: redisio, zkio).
	Enter(ctx context.Context) error
	// Leave blocks until every party that entered has left or is gone.
	// ErrNotEntered if this party has not entered. If ctx ends first it
	// returns ctx.Err(); Leave may then be called again.
	Leave(ctx context.Context) error
	// Count is the number of parties the barrier waits for.
	Count() int
	// Done is closed when the party's session is lost or Close is called.
	Done() <-chan struct{}
	// Err is nil while the party is usable; afterwards it wraps
	// primitives.ErrLost or primitives.ErrClosed.
	Err() error
	// Close takes this party out of the barrier and ends it.
	Close() error
}
