package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestSuspendedThenResumed: when the session's refreshes stop reaching
// Redis for half its TTL, the holder gets Suspended with the deadline (no
// later than a TTL after the last refresh was sent); a refresh in time
// brings Resumed and the hold is intact.
func TestSuspendedThenResumed(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli, redisio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := redisio.NewLock(cli, "suspend", redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	paused := time.Now()
	testhook.PauseRenewal(s, resume)
	var sus primitives.Suspended
	for e := range events {
		if e, ok := e.(primitives.Suspended); ok {
			sus = e
			break
		}
	}
	close(resume)
	if sus.Created != g.Created || sus.Token != g.Token() {
		t.Fatalf("Suspended %+v for grant %+v", sus, g)
	}
	if sus.Deadline.After(paused.Add(ttl)) {
		t.Fatalf("Suspended deadline %v is later than a TTL after the pause began (%v)", sus.Deadline, paused.Add(ttl))
	}
	for e := range events {
		if e, ok := e.(primitives.Resumed); ok {
			if e.Created != g.Created {
				t.Fatalf("Resumed %+v for grant %+v", e, g)
			}
			break
		}
		if _, ok := e.(primitives.Lost); ok {
			t.Fatalf("Lost before Resumed: %+v", e)
		}
	}
	if err := l.Release(ctx, g); err != nil {
		t.Fatalf("Release after Resumed: %v", err)
	}
}

// TestCancelOnSuspend: with WithCancelOnSuspend, lock.Do's fn sees its
// context end at Suspended, with a cause wrapping primitives.ErrSuspended.
func TestCancelOnSuspend(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli, redisio.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l, err := redisio.NewLock(cli, "cancel-on-suspend", redisio.WithSession(s), redisio.WithCancelOnSuspend())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	resume := make(chan struct{})
	defer close(resume)
	err = lock.Do(ctx, l, func(fctx context.Context, _ lock.Grant) error {
		testhook.PauseRenewal(s, resume)
		<-fctx.Done()
		if cause := context.Cause(fctx); !errors.Is(cause, primitives.ErrSuspended) {
			t.Errorf("fn's context ended with %v, want a cause wrapping ErrSuspended", cause)
		}
		return nil
	})
	if !errors.Is(err, primitives.ErrSuspended) {
		t.Fatalf("Do = %v, want an error wrapping ErrSuspended", err)
	}
}

// TestGrantWhileSuspended: a hold granted while its session is suspended
// is followed at once by Suspended, with the session's deadline, so that
// with WithCancelOnSuspend its owner stops as its sibling on the same
// session was told to.
func TestGrantWhileSuspended(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const ttl = 4 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli, redisio.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sibling, err := redisio.NewLock(cli, "suspended-sibling", redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sibling.Close() })
	late, err := redisio.NewLock(cli, "suspended-late", redisio.WithSession(s), redisio.WithCancelOnSuspend())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { late.Close() })
	sibEvents := sibling.Subscribe(ctx)
	if _, err := sibling.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	defer close(resume)
	testhook.PauseRenewal(s, resume)
	var sus primitives.Suspended
	for e := range sibEvents {
		if e, ok := e.(primitives.Suspended); ok {
			sus = e
			break
		}
	}
	events := late.Subscribe(ctx)
	var got lock.Grant
	err = lock.Do(ctx, late, func(fctx context.Context, g lock.Grant) error {
		got = g
		<-fctx.Done()
		if cause := context.Cause(fctx); !errors.Is(cause, primitives.ErrSuspended) {
			t.Errorf("fn's context ended with %v, want a cause wrapping ErrSuspended", cause)
		}
		return nil
	})
	if !errors.Is(err, primitives.ErrSuspended) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do granted while suspended = %v, want ErrSuspended alone", err)
	}
	var seq []primitives.Event
	for e := range events {
		if seq = append(seq, e); len(seq) == 2 {
			break
		}
	}
	if len(seq) < 2 {
		t.Fatalf("events %#v, want Acquired and Suspended", seq)
	}
	if a, ok := seq[0].(primitives.Acquired); !ok || a.Created != got.Created {
		t.Fatalf("first event %#v, want Acquired of %+v", seq[0], got)
	}
	if e, ok := seq[1].(primitives.Suspended); !ok || e.Created != got.Created || !e.Deadline.Equal(sus.Deadline) {
		t.Fatalf("event after Acquired %#v, want Suspended of %+v with the session's deadline %v", seq[1], got, sus.Deadline)
	}
}
