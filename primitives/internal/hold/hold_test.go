package hold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/internal/hold"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// owner is a primitive reduced to what Hold needs: events and an end.
type owner struct {
	events *actor.Fanout[primitives.Event]
	done   chan struct{}
	err    error
}

func newOwner() *owner {
	return &owner{events: actor.NewFanout(primitives.Coalescable), done: make(chan struct{})}
}

func (o *owner) Subscribe(ctx context.Context) <-chan primitives.Event {
	return o.events.Subscribe(ctx)
}
func (o *owner) Done() <-chan struct{} { return o.done }
func (o *owner) Err() error            { return o.err }

type grant struct {
	key     string
	created int64
}

var errNotHeld = errors.New("not held")

func spec(acquire func(context.Context) (grant, error), release func(context.Context, grant) error) hold.Spec[grant] {
	return hold.Spec[grant]{Acquire: acquire, Created: func(g grant) int64 { return g.created },
		Release: release, NotHeld: errNotHeld, ReleaseTimeout: time.Second}
}

func run(ctx context.Context, o hold.Owner, g grant, fn func(context.Context, grant) error, release func(context.Context, grant) error) error {
	return hold.Run(ctx, o, spec(func(context.Context) (grant, error) { return g, nil }, release), fn)
}

func TestHoldReleasesAfterFn(t *testing.T) {
	o := newOwner()
	var released grant
	fnErr := errors.New("fn failed")
	err := run(context.Background(), o, grant{"k", 7}, func(ctx context.Context, g grant) error {
		// A Lost for an earlier hold of the same key and token (readers of
		// one epoch share a token; key names are reused) must not end this one.
		o.events.Publish(primitives.Lost{Key: "k", Token: 7, Created: 6, Err: primitives.ErrLost})
		return fnErr
	}, func(_ context.Context, g grant) error { released = g; return nil })
	if !errors.Is(err, fnErr) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Hold = %v, want fn's error only", err)
	}
	if released != (grant{"k", 7}) {
		t.Fatalf("released %+v", released)
	}
}

func TestHoldCancelsOnLost(t *testing.T) {
	o := newOwner()
	released := false
	err := run(context.Background(), o, grant{"k", 7}, func(ctx context.Context, g grant) error {
		o.events.Publish(primitives.Lost{Key: "k", Token: 7, Created: 7, Err: primitives.ErrLost})
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), primitives.ErrLost) {
			t.Errorf("cause %v, want ErrLost", context.Cause(ctx))
		}
		return nil
	}, func(context.Context, grant) error { released = true; return nil })
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Hold = %v, want ErrLost", err)
	}
	if released {
		t.Fatal("a lost hold was released")
	}
}

func TestHoldCancelsWhenDone(t *testing.T) {
	o := newOwner()
	o.err = primitives.ErrLost
	err := run(context.Background(), o, grant{"k", 1}, func(ctx context.Context, g grant) error {
		close(o.done)
		<-ctx.Done()
		return nil
	}, func(context.Context, grant) error { return nil })
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Hold = %v, want the owner's error", err)
	}
}

func TestHoldReleaseFindsHoldGone(t *testing.T) {
	o := newOwner()
	err := run(context.Background(), o, grant{"k", 1}, func(context.Context, grant) error { return nil },
		func(context.Context, grant) error { return errNotHeld })
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Hold = %v, want ErrLost when the release finds the hold gone", err)
	}
}

func TestHoldAcquireFails(t *testing.T) {
	o := newOwner()
	boom := errors.New("boom")
	called := false
	err := hold.Run(context.Background(), o,
		spec(func(context.Context) (grant, error) { return grant{}, boom }, func(context.Context, grant) error { return nil }),
		func(context.Context, grant) error { called = true; return nil })
	if !errors.Is(err, boom) || called {
		t.Fatalf("Hold = %v (fn called: %v), want the acquire error and no fn", err, called)
	}
}

// suspending is an owner built to cancel at Suspended.
type suspending struct{ *owner }

func (suspending) CancelOnSuspend() bool { return true }

func TestHoldCancelsOnSuspendedWhenAsked(t *testing.T) {
	o := newOwner()
	released := false
	deadline := time.Now().Add(time.Second)
	err := run(context.Background(), suspending{o}, grant{"k", 7}, func(ctx context.Context, g grant) error {
		o.events.Publish(primitives.Suspended{Key: "k", Token: 7, Created: 7, Deadline: deadline})
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), primitives.ErrSuspended) {
			t.Errorf("cause %v, want ErrSuspended", context.Cause(ctx))
		}
		// The cause says when the hold may end, for fn to stop before.
		var se *primitives.SuspendedError
		if !errors.As(context.Cause(ctx), &se) || !se.Deadline.Equal(deadline) || se.Key != "k" {
			t.Errorf("cause %#v, want a SuspendedError with the Suspended's key and deadline", context.Cause(ctx))
		}
		return nil
	}, func(context.Context, grant) error { released = true; return nil })
	if !errors.Is(err, primitives.ErrSuspended) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Hold = %v, want ErrSuspended alone", err)
	}
	if !released {
		t.Fatal("a suspended but live hold was not released")
	}
}

func TestHoldIgnoresSuspendedByDefault(t *testing.T) {
	o := newOwner()
	err := run(context.Background(), o, grant{"k", 7}, func(ctx context.Context, g grant) error {
		o.events.Publish(primitives.Suspended{Key: "k", Token: 7, Created: 7, Deadline: time.Now().Add(time.Second)})
		o.events.Publish(primitives.Resumed{Key: "k", Token: 7, Created: 7})
		// Wait for both to pass through: a zero-Created Lost is published
		// after them and must not match either.
		o.events.Publish(primitives.Lost{Key: "k", Token: 7, Err: primitives.ErrLost})
		select {
		case <-ctx.Done():
			t.Errorf("fn's context ended: %v", context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
		return nil
	}, func(context.Context, grant) error { return nil })
	if err != nil {
		t.Fatalf("Hold = %v, want nil", err)
	}
}

// Check refuses a nil context, a nil service (a nil interface, or a nil
// pointer in one) and a nil fn; CheckFn a nil context and a nil fn.
func TestCheckRejectsNil(t *testing.T) {
	var nilOwner *owner
	var noContext context.Context
	ctx := context.Background()
	for _, c := range []struct {
		ctx context.Context
		s   any
		fn  bool
	}{{ctx, nil, false}, {ctx, nilOwner, false}, {ctx, newOwner(), true}, {noContext, newOwner(), false}} {
		if err := hold.Check(c.ctx, "lock.Do", c.s, c.fn); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("Check(%v, %#v, %v) = %v, want ErrInvalidArgument", c.ctx, c.s, c.fn, err)
		}
	}
	if err := hold.Check(ctx, "lock.Do", newOwner(), false); err != nil {
		t.Errorf("Check of good input: %v", err)
	}
	for _, c := range []struct {
		ctx context.Context
		fn  bool
	}{{ctx, true}, {noContext, false}} {
		if err := hold.CheckFn(c.ctx, "lock.Supervise", c.fn); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("CheckFn(%v, %v) = %v, want ErrInvalidArgument", c.ctx, c.fn, err)
		}
	}
	if err := hold.CheckFn(ctx, "lock.Supervise", false); err != nil {
		t.Errorf("CheckFn of good input: %v", err)
	}
}

// A grant won just as ctx ended (the acquisition and the cancellation
// raced) is released at once, and fn is not run: Do and Lead return
// ctx's error, and no owner works under a context already over.
func TestHoldGrantWonAsContextEnds(t *testing.T) {
	o := newOwner()
	ctx, cancel := context.WithCancel(context.Background())
	var released grant
	acquire := func(context.Context) (grant, error) { cancel(); return grant{"k", 7}, nil }
	err := hold.Run(ctx, o, spec(acquire, func(_ context.Context, g grant) error { released = g; return nil }),
		func(context.Context, grant) error {
			t.Error("fn ran with its context already ended")
			return nil
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if released != (grant{"k", 7}) {
		t.Fatalf("released %+v, want the grant", released)
	}
}
