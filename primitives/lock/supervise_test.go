package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// singleton is one test's worker setup: a store (the in-memory backend:
// these tests are of Supervise, not of a backend), a prefix, and a
// constructor of lock services on them that keeps what it built.
type singleton struct {
	st       *memio.Store
	prefix   string
	mu       sync.Mutex
	built    int
	sessions []*memio.Session
}

func newSingleton(t *testing.T) *singleton {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	return &singleton{st: memio.NewStore(), prefix: "/test/supervise/" + t.Name()}
}

func (w *singleton) newService(ctx context.Context) (lock.Service, error) {
	l, err := memio.NewLock(w.st, w.prefix, memio.WithTTL(5*time.Second), memio.WithContext(ctx))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.built++
	if err == nil {
		w.sessions = append(w.sessions, memio.SessionOf(l))
	}
	return l, err
}

// expire ends the session of the service that holds g.
func (w *singleton) expire(t *testing.T, g lock.Grant) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.sessions {
		if s.LeaseID() == g.LeaseID {
			s.Expire()
			return
		}
	}
	t.Fatalf("no session %d", g.LeaseID)
}

// keys returns how many keys are under the prefix.
func (w *singleton) keys(t *testing.T) int64 {
	t.Helper()
	return int64(len(w.st.Keys(w.prefix + "/")))
}

var fast = lock.WithBackoff(10*time.Millisecond, 100*time.Millisecond)

func TestSuperviseWorkerEnds(t *testing.T) {
	w := newSingleton(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := lock.Supervise(ctx, w.newService, func(ctx context.Context, g lock.Grant) error { return nil }, fast)
	if err != nil || w.built != 1 {
		t.Fatalf("Supervise = %v with %d services, want nil with 1", err, w.built)
	}
	boom := errors.New("boom")
	err = lock.Supervise(ctx, w.newService, func(ctx context.Context, g lock.Grant) error { return boom }, fast)
	if !errors.Is(err, boom) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Supervise = %v, want fn's error alone", err)
	}
	if n := w.keys(t); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// The worker is restarted with a higher token after its session is lost,
// and the context's end stops it promptly, leaving no key.
func TestSuperviseWorkerRejoinsAndStops(t *testing.T) {
	w := newSingleton(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holds := make(chan lock.Grant)
	done := make(chan error, 1)
	go func() {
		done <- lock.Supervise(ctx, w.newService, func(ctx context.Context, g lock.Grant) error {
			holds <- g
			<-ctx.Done()
			return ctx.Err()
		}, fast)
	}()
	var last lock.Grant
	for round := range 3 {
		g := <-holds
		if g.Token() <= last.Token() {
			t.Fatalf("round %d: token %d not above %d", round, g.Token(), last.Token())
		}
		last = g
		if round < 2 {
			w.expire(t, g)
		}
	}
	cancel()
	start := time.Now()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Supervise = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Supervise took %v to stop", took)
	}
	if w.built != 3 {
		t.Errorf("%d services built, want 3 (one per session)", w.built)
	}
	if n := w.keys(t); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// A newService that returns a Service along with an error (built, then
// a check of it failed) gets that Service closed: Supervise does not use it,
// and does not leak its session, whether it then retries, gives up on an
// invalid argument, or returns because ctx ended.
func TestSuperviseClosesServiceReturnedWithError(t *testing.T) {
	w := newSingleton(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var failed []lock.Service
	withError := func(err error) func(ctx context.Context) (lock.Service, error) {
		return func(ctx context.Context) (lock.Service, error) {
			s, nerr := w.newService(ctx)
			if nerr != nil {
				return nil, nerr
			}
			failed = append(failed, s)
			return s, err
		}
	}
	fn := func(ctx context.Context, g lock.Grant) error { return nil }

	// Retried: the first Service came with an error, the second without.
	calls := 0
	flaky := func(ctx context.Context) (lock.Service, error) {
		if calls++; calls == 1 {
			return withError(errors.New("warm-up failed"))(ctx)
		}
		return w.newService(ctx)
	}
	if err := lock.Supervise(ctx, flaky, fn, fast); err != nil {
		t.Fatalf("Supervise = %v, want nil after one retry", err)
	}
	// Permanent: an error wrapping ErrInvalidArgument.
	bad := fmt.Errorf("bad option: %w", primitives.ErrInvalidArgument)
	if err := lock.Supervise(ctx, withError(bad), fn, fast); !errors.Is(err, bad) {
		t.Fatalf("Supervise = %v, want the constructor's error", err)
	}
	// ctx ended while newService ran.
	cctx, ccancel := context.WithCancel(ctx)
	ended := func(ctx context.Context) (lock.Service, error) {
		s, err := withError(context.Canceled)(ctx)
		ccancel()
		return s, err
	}
	if err := lock.Supervise(cctx, ended, fn, fast); !errors.Is(err, context.Canceled) {
		t.Fatalf("Supervise = %v, want context.Canceled", err)
	}
	if len(failed) != 3 {
		t.Fatalf("%d services came with an error, want 3", len(failed))
	}
	for i, s := range failed {
		if !errors.Is(s.Err(), primitives.ErrClosed) {
			t.Errorf("service %d, returned with an error: Err = %v, want it closed", i, s.Err())
		}
	}
}

// releaseHook is a lock Service whose Release runs before first: Do
// releases after fn returns, so before runs after fn's return and before
// Supervise sees the hold's outcome.
type releaseHook struct {
	lock.Service
	before func()
}

func (r releaseHook) Release(ctx context.Context, g lock.Grant) error {
	r.before()
	return r.Service.Release(ctx, g)
}

// Supervise's result is decided when fn returns: if ctx was live then and
// the hold intact, fn's result stands, also when ctx ends during the
// release that follows (the work was done, or failed, before the end). An
// fn that returns after ctx ended may have stopped early: that is ctx's
// error.
func TestSuperviseResultDecidedWhenFnReturns(t *testing.T) {
	w := newSingleton(t)
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		fnErr     error
		cancelIn  string // "release": after fn returned; "fn": before
		want, not error
	}{
		{"nil, then ctx ended", nil, "release", nil, context.Canceled},
		{"error, then ctx ended", boom, "release", boom, context.Canceled},
		{"nil after ctx ended", nil, "fn", context.Canceled, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			newService := func(ctx context.Context) (lock.Service, error) {
				s, err := w.newService(ctx)
				if err != nil {
					return nil, err
				}
				return releaseHook{s, func() {
					if tc.cancelIn == "release" {
						cancel()
					}
				}}, nil
			}
			err := lock.Supervise(ctx, newService, func(fnCtx context.Context, g lock.Grant) error {
				if tc.cancelIn == "fn" {
					cancel()
					<-fnCtx.Done()
				}
				return tc.fnErr
			}, fast)
			if (tc.want == nil) != (err == nil) || !errors.Is(err, tc.want) || (tc.not != nil && errors.Is(err, tc.not)) {
				t.Fatalf("Supervise = %v, want %v (and not %v)", err, tc.want, tc.not)
			}
			if ctx.Err() == nil {
				t.Fatal("ctx did not end: the test did not test")
			}
			if n := w.keys(t); n != 0 {
				t.Fatalf("%d keys left", n)
			}
		})
	}
}
