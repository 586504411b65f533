package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
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
	key   string
	token fencing.Token
}

func id(g grant) (string, fencing.Token) { return g.key, g.token }

var errNotHeld = errors.New("not held")

func hold(ctx context.Context, o *owner, g grant, fn func(context.Context, grant) error, release func(context.Context, grant) error) error {
	acquire := func(context.Context) (grant, error) { return g, nil }
	return primitives.Hold(ctx, o, acquire, id, fn, release, errNotHeld, time.Second)
}

func TestHoldReleasesAfterFn(t *testing.T) {
	o := newOwner()
	var released grant
	fnErr := errors.New("fn failed")
	err := hold(context.Background(), o, grant{"k", 7}, func(ctx context.Context, g grant) error {
		// A Lost for an earlier hold of the same key must not end this one.
		o.events.Publish(primitives.Lost{Key: "k", Token: 6, Err: primitives.ErrLost})
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
	err := hold(context.Background(), o, grant{"k", 7}, func(ctx context.Context, g grant) error {
		o.events.Publish(primitives.Lost{Key: "k", Token: 7, Err: primitives.ErrLost})
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
	err := hold(context.Background(), o, grant{"k", 1}, func(ctx context.Context, g grant) error {
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
	err := hold(context.Background(), o, grant{"k", 1}, func(context.Context, grant) error { return nil },
		func(context.Context, grant) error { return errNotHeld })
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Hold = %v, want ErrLost when the release finds the hold gone", err)
	}
}

func TestHoldAcquireFails(t *testing.T) {
	o := newOwner()
	boom := errors.New("boom")
	called := false
	err := primitives.Hold(context.Background(), o,
		func(context.Context) (grant, error) { return grant{}, boom }, id,
		func(context.Context, grant) error { called = true; return nil },
		func(context.Context, grant) error { return nil }, errNotHeld, time.Second)
	if !errors.Is(err, boom) || called {
		t.Fatalf("Hold = %v (fn called: %v), want the acquire error and no fn", err, called)
	}
}
