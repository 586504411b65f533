package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
)

// A grant released by another call of its owner while fn runs (Unlock,
// Resign: a step down) ends fn's context with a cause wrapping
// primitives.ErrReleased: fn must not go on as if it held, once another
// owner may. Do then releases nothing and returns fn's error alone.
func TestHelpersEndFnWhenGrantReleased(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	a := testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(st, "/e"))
	b := testkit.ClosedAtEnd[election.Service](t)(memio.NewElection(st, "/e"))
	bLeads := make(chan error, 1)
	err := election.Lead(context.Background(), a, "a", func(ctx context.Context, l election.Leadership) error {
		go func() { bLeads <- b.Campaign(context.Background(), "b") }()
		if err := a.Resign(context.Background()); err != nil {
			return err
		}
		if err := <-bLeads; err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			return errors.New("b leads, and a's fn still runs with a live context")
		}
		if cause := context.Cause(ctx); !errors.Is(cause, primitives.ErrReleased) {
			return fmt.Errorf("fn's context ended with %v, want a cause wrapping ErrReleased", cause)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Lead = %v, want nil", err)
	}

	l := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/l"))
	err = lock.Do(context.Background(), l, func(ctx context.Context, g lock.Grant) error {
		if err := l.Unlock(context.Background()); err != nil {
			return err
		}
		<-ctx.Done()
		return errFn
	})
	if !errors.Is(err, errFn) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do = %v, want fn's error alone", err)
	}
}

var errFn = errors.New("fn failed")

// fn panics and its caller recovers (as net/http does for a handler): the
// grant is released on the way out and the Service can lock again.
func TestDoReleasesWhenFnPanics(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	l := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/a"))
	func() {
		defer func() { _ = recover() }()
		_ = lock.Do(context.Background(), l, func(context.Context, lock.Grant) error { panic("boom") })
	}()
	if keys := st.Keys("/a/"); len(keys) != 0 {
		t.Fatalf("keys left after fn panicked: %v", keys)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lock.Do(ctx, l, func(context.Context, lock.Grant) error { return nil }); err != nil {
		t.Fatalf("the next Do on the Service: %v", err)
	}
}

// A Service built to cancel at Suspended, granted on a suspended session:
// fn starts with its context ended already, its cause a SuspendedError.
func TestDoOnSuspendedSessionStartsCancelled(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	s, err := memio.NewSession(st, memio.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(st, "/a", memio.WithSession(s), memio.WithCancelOnSuspend()))
	s.Suspend()
	live := 0
	for range 20 {
		err := lock.Do(context.Background(), l, func(ctx context.Context, g lock.Grant) error {
			if ctx.Err() == nil {
				live++
			}
			return nil
		})
		if !errors.Is(err, primitives.ErrSuspended) {
			t.Fatalf("Do on a suspended session = %v, want an error wrapping ErrSuspended", err)
		}
	}
	if live > 0 {
		t.Fatalf("fn started with a live context on a suspended session %d times in 20", live)
	}
}

// fn's own error that wraps ErrLost (an inner lock lost) with the
// supervised hold intact ends Supervise with it: it is not a lost term.
func TestSuperviseFnErrorWrappingErrLost(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	var runs atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inner := fmt.Errorf("inner lock /b: %w", primitives.ErrLost)
	err := lock.Supervise(ctx, func(context.Context) (lock.Service, error) { return memio.NewLock(st, "/a") },
		func(context.Context, lock.Grant) error {
			runs.Add(1)
			return inner
		}, lock.WithBackoff(10*time.Millisecond, 20*time.Millisecond))
	if !errors.Is(err, inner) || runs.Load() != 1 {
		t.Fatalf("Supervise = %v after %d runs of fn; want fn's error after one run", err, runs.Load())
	}
}

// Close while Do's fn runs ends fn's context with the service's end, and
// Do returns an error wrapping primitives.ErrClosed: the grant's Released
// that Close sends is not a release by another call.
func TestDoEndsWithErrClosedAtClose(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	for i := range 300 {
		l, err := memio.NewLock(st, "/a")
		if err != nil {
			t.Fatal(err)
		}
		err = lock.Do(context.Background(), l, func(ctx context.Context, g lock.Grant) error {
			go l.Close()
			<-ctx.Done()
			if cause := context.Cause(ctx); !errors.Is(cause, primitives.ErrClosed) {
				return fmt.Errorf("fn's context ended with %v, want a cause wrapping ErrClosed", cause)
			}
			return nil
		})
		if !errors.Is(err, primitives.ErrClosed) {
			t.Fatalf("run %d: Do = %v, want an error wrapping ErrClosed", i, err)
		}
	}
}

// Supervise with a Service built to cancel at Suspended waits, after a
// hold that a suspension ended, until the session resumes: it does not
// lock again each backoff meanwhile, starting fn with its context ended
// each time. Once the session resumes, fn runs again with a live context.
func TestSuperviseWaitsForResumeAfterSuspension(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	s, err := memio.NewSession(st, memio.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type run struct{ live bool }
	runs := make(chan run, 100)
	retried := make(chan error, 100)
	done := make(chan error, 1)
	go func() {
		done <- lock.Supervise(ctx, func(context.Context) (lock.Service, error) {
			return memio.NewLock(st, "/a", memio.WithSession(s), memio.WithCancelOnSuspend())
		}, func(ctx context.Context, g lock.Grant) error {
			runs <- run{live: ctx.Err() == nil}
			<-ctx.Done()
			return nil
		}, lock.WithBackoff(time.Millisecond, 2*time.Millisecond),
			lock.OnRetry(func(_ int, err error) { retried <- err }))
	}()
	if r := <-runs; !r.live {
		t.Fatal("first run: fn started with its context ended")
	}
	s.Suspend()
	if err := <-retried; !errors.Is(err, primitives.ErrSuspended) {
		t.Fatalf("OnRetry got %v, want an error wrapping ErrSuspended", err)
	}
	// Not synchronisation: the window in which a Supervise that locks
	// each backoff (1 to 2 ms) would have run fn many times.
	select {
	case r := <-runs:
		t.Fatalf("fn ran again (live context: %v) while the session was suspended", r.live)
	case <-time.After(200 * time.Millisecond):
	}
	s.Resume()
	if r := <-runs; !r.live {
		t.Fatal("after Resume: fn started with its context ended")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Supervise = %v, want context.Canceled", err)
	}
}

// fn panics under a supervisor and its caller recovers: the panic goes on
// out of Supervise, unchanged, after the grant was released, the Service
// closed and its events delivered to OnEvent; nothing is left in the store.
func TestSupervisePanicClosesService(t *testing.T) {
	testkit.NoLeaks(t)
	st := memio.NewStore()
	recovered := func(f func()) (v any) {
		defer func() { v = recover() }()
		f()
		return nil
	}
	var l lock.Service
	var events []primitives.Event
	v := recovered(func() {
		_ = lock.Supervise(context.Background(), func(context.Context) (lock.Service, error) {
			var err error
			l, err = memio.NewLock(st, "/l")
			return l, err
		}, func(context.Context, lock.Grant) error { panic("boom") },
			lock.OnEvent(func(e primitives.Event) { events = append(events, e) }))
	})
	if v != "boom" {
		t.Fatalf("lock.Supervise: recovered %v, want fn's panic", v)
	}
	if !errors.Is(l.Err(), primitives.ErrClosed) || len(st.Keys("/l/")) != 0 {
		t.Fatalf("lock.Supervise after fn panicked: Service's Err %v, keys %v; want it closed, nothing left", l.Err(), st.Keys("/l/"))
	}
	if len(events) != 2 {
		t.Fatalf("lock.Supervise after fn panicked: OnEvent got %v, want Acquired and Released", events)
	}

	var e election.Service
	v = recovered(func() {
		_ = election.Supervise(context.Background(), func(context.Context) (election.Service, error) {
			var err error
			e, err = memio.NewElection(st, "/e")
			return e, err
		}, "a", func(context.Context, election.Leadership) error { panic("boom") })
	})
	if v != "boom" {
		t.Fatalf("election.Supervise: recovered %v, want fn's panic", v)
	}
	if !errors.Is(e.Err(), primitives.ErrClosed) || len(st.Keys("/e/")) != 0 {
		t.Fatalf("election.Supervise after fn panicked: Service's Err %v, keys %v; want it closed, nothing left", e.Err(), st.Keys("/e/"))
	}
}
