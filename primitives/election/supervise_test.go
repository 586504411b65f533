package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// fixture is one test's store (the in-memory backend: these tests are of
// Supervise, not of a backend), prefix and a constructor of election
// services on them that counts what it built.
type fixture struct {
	st     *memio.Store
	prefix string
	mu     sync.Mutex
	built  []election.Service
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	return &fixture{st: memio.NewStore(), prefix: "/test/supervise/" + t.Name()}
}

func (f *fixture) newService(ctx context.Context) (election.Service, error) {
	s, err := memio.NewElection(f.st, f.prefix, memio.WithTTL(5*time.Second), memio.WithContext(ctx))
	if err == nil {
		f.mu.Lock()
		f.built = append(f.built, s)
		f.mu.Unlock()
	}
	return s, err
}

// check verifies that every service built was closed and that nothing is
// left under the prefix.
func (f *fixture) check(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.built {
		if !errors.Is(s.Err(), primitives.ErrClosed) && !errors.Is(s.Err(), primitives.ErrLost) {
			t.Errorf("service %d not closed: Err = %v", i, s.Err())
		}
	}
	if keys := f.st.Keys(f.prefix + "/"); len(keys) != 0 {
		t.Errorf("keys left under %s: %v", f.prefix, keys)
	}
}

// sessionOf returns the session of the service leading in term l.
func (f *fixture) sessionOf(t *testing.T, l election.Leadership) *memio.Session {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.built {
		if term, ok := s.Term(); ok && term.Created == l.Created {
			return memio.SessionOf(s)
		}
	}
	t.Fatalf("no service leads in term %d", l.Created)
	return nil
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var fast = election.WithBackoff(10*time.Millisecond, 100*time.Millisecond)

func TestSuperviseFnNilEnds(t *testing.T) {
	f := newFixture(t)
	terms := 0
	err := election.Supervise(testCtx(t, 20*time.Second), f.newService, "v", func(ctx context.Context, l election.Leadership) error {
		terms++
		if l.Value != "v" || l.Token() <= 0 {
			t.Errorf("term %+v", l)
		}
		return nil
	}, fast)
	if err != nil || terms != 1 || len(f.built) != 1 {
		t.Fatalf("Supervise = %v after %d terms on %d services, want nil after 1 on 1", err, terms, len(f.built))
	}
	f.check(t)
}

func TestSuperviseFnErrorReturned(t *testing.T) {
	f := newFixture(t)
	boom := errors.New("boom")
	err := election.Supervise(testCtx(t, 20*time.Second), f.newService, "v", func(ctx context.Context, l election.Leadership) error {
		return boom
	}, fast)
	if !errors.Is(err, boom) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Supervise = %v, want fn's error alone", err)
	}
	f.check(t)
}

// The context's end stops Supervise promptly, while leading or while
// waiting in line, and leaves no key behind.
func TestSuperviseContextEnds(t *testing.T) {
	f := newFixture(t)
	// Another candidate leads, so the second supervisor waits in line.
	ctx, cancel := context.WithCancel(testCtx(t, 20*time.Second))
	leading := make(chan struct{})
	results := make(chan error, 2)
	go func() {
		results <- election.Supervise(ctx, f.newService, "first", func(ctx context.Context, l election.Leadership) error {
			close(leading)
			<-ctx.Done()
			return ctx.Err()
		}, fast)
	}()
	<-leading
	go func() {
		results <- election.Supervise(ctx, f.newService, "second", func(ctx context.Context, l election.Leadership) error {
			t.Error("the second candidate led while the first did")
			return nil
		}, fast)
	}()
	waitKeys(t, f, 2)
	cancel()
	start := time.Now()
	for range 2 {
		if err := <-results; !errors.Is(err, context.Canceled) {
			t.Errorf("Supervise = %v, want context.Canceled", err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Supervise took %v to return after its context ended", took)
	}
	f.check(t)
}

// waitKeys polls until n keys are under the fixture's prefix.
func waitKeys(t *testing.T, f *fixture, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if int64(len(f.st.Keys(f.prefix+"/"))) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %d keys under %s", n, f.prefix)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// After a lost session (it expired) Supervise builds a new service
// and leads again with a higher token; after a term lost alone (its key
// deleted) it campaigns again on the same service. OnEvent reports each
// term in order, and OnRetry each loss.
func TestSuperviseRejoins(t *testing.T) {
	f := newFixture(t)
	ctx := testCtx(t, 20*time.Second)
	terms := make(chan election.Leadership)
	var events []string
	var retries []int
	var n atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- election.Supervise(ctx, f.newService, "v", func(ctx context.Context, l election.Leadership) error {
			if n.Add(1) == 4 {
				return nil // the work is done
			}
			terms <- l
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), primitives.ErrLost) {
				t.Errorf("term's context ended with %v, want ErrLost", context.Cause(ctx))
			}
			return ctx.Err()
		}, fast, election.OnEvent(func(e primitives.Event) {
			switch e.(type) {
			case primitives.Acquired, primitives.Released, primitives.Lost:
				events = append(events, fmt.Sprintf("%T", e)[len("primitives."):])
			}
		}), election.OnRetry(func(attempt int, err error) {
			if !errors.Is(err, primitives.ErrLost) {
				t.Errorf("OnRetry(%d, %v), want the loss", attempt, err)
			}
			retries = append(retries, attempt)
		}))
	}()
	var last election.Leadership
	for round := range 3 {
		var l election.Leadership
		select {
		case l = <-terms:
		case err := <-done:
			t.Fatalf("Supervise returned %v in round %d", err, round)
		}
		if l.Token() <= last.Token() {
			t.Fatalf("round %d: token %d not above %d", round, l.Token(), last.Token())
		}
		last = l
		if round == 1 {
			// The key alone goes: the session lives.
			if !f.st.DeleteKey(l.Key) {
				t.Fatalf("the leader's key %s is not in the store", l.Key)
			}
		} else {
			f.sessionOf(t, l).Expire()
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("Supervise = %v, want nil once fn returned nil", err)
	}
	// Rounds 0 and 2 lost the session; round 1 only the key.
	if len(f.built) != 3 {
		t.Errorf("%d services built, want 3", len(f.built))
	}
	if want := "[Acquired Lost Acquired Lost Acquired Lost Acquired Released]"; fmt.Sprint(events) != want {
		t.Errorf("events %v, want %s", events, want)
	}
	if fmt.Sprint(retries) != "[1 2 3]" {
		t.Errorf("OnRetry attempts %v, want [1 2 3]", retries)
	}
	f.check(t)
}

// A constructor error is retried with backoff; one wrapping
// primitives.ErrInvalidArgument is returned at once.
func TestSuperviseConstructorErrors(t *testing.T) {
	f := newFixture(t)
	calls := 0
	flaky := func(ctx context.Context) (election.Service, error) {
		if calls++; calls <= 2 {
			return nil, errors.New("store unreachable")
		}
		return f.newService(ctx)
	}
	var waits []int
	err := election.Supervise(testCtx(t, 20*time.Second), flaky, "v", func(ctx context.Context, l election.Leadership) error {
		return nil
	}, fast, election.OnRetry(func(attempt int, err error) { waits = append(waits, attempt) }))
	if err != nil || fmt.Sprint(waits) != "[1 2]" {
		t.Fatalf("Supervise = %v after retries %v, want nil after [1 2]", err, waits)
	}

	// A backend's bad-input error is permanent: Supervise gives up at once.
	bad := func(ctx context.Context) (election.Service, error) {
		return memio.NewElection(f.st, "")
	}
	err = election.Supervise(testCtx(t, 20*time.Second), bad, "v", func(ctx context.Context, l election.Leadership) error {
		t.Error("fn ran without a service")
		return nil
	}, fast)
	if !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Supervise = %v, want ErrInvalidArgument", err)
	}
	if err := election.Supervise(context.Background(), f.newService, "v", nil); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Supervise with a nil fn = %v, want ErrInvalidArgument", err)
	}
	if err := election.Supervise(context.Background(), nil, "v", func(context.Context, election.Leadership) error { return nil }); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Supervise with a nil newService = %v, want ErrInvalidArgument", err)
	}
	noop := func(context.Context, election.Leadership) error { return nil }
	if err := election.Supervise(context.Background(), f.newService, "v", noop, election.SuperviseOption{}); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Supervise with a zero option = %v, want ErrInvalidArgument", err)
	}
	f.check(t)
}

// Close while Lead's fn runs ends fn's context and Lead returns an error
// wrapping primitives.ErrClosed.
func TestLeadEndsWithErrClosedAtClose(t *testing.T) {
	e, err := memio.NewElection(memio.NewStore(), "/e")
	if err != nil {
		t.Fatal(err)
	}
	err = election.Lead(context.Background(), e, "v", func(ctx context.Context, _ election.Leadership) error {
		go e.Close()
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Lead = %v, want an error wrapping ErrClosed", err)
	}
}

// A newService that returns a Service along with an error (built, then
// a check of it failed) gets that Service closed: Supervise does not
// campaign with it, and does not leak its session.
func TestSuperviseClosesServiceReturnedWithError(t *testing.T) {
	f := newFixture(t)
	calls := 0
	var failed election.Service
	flaky := func(ctx context.Context) (election.Service, error) {
		s, err := f.newService(ctx)
		if calls++; calls == 1 && err == nil {
			failed = s
			return s, errors.New("warm-up failed")
		}
		return s, err
	}
	err := election.Supervise(testCtx(t, 20*time.Second), flaky, "v", func(ctx context.Context, l election.Leadership) error {
		return nil
	}, fast)
	if err != nil {
		t.Fatalf("Supervise = %v, want nil after one retry", err)
	}
	if failed == nil || !errors.Is(failed.Err(), primitives.ErrClosed) {
		t.Fatalf("the service returned with an error: %v, want it closed", failed)
	}
	f.check(t)
}

// resignHook is an election Service whose ResignTerm runs before first:
// Lead resigns after fn returns, so before runs after fn's return and
// before Supervise sees the term's outcome.
type resignHook struct {
	election.Service
	before func()
}

func (r resignHook) ResignTerm(ctx context.Context, term election.Leadership) error {
	r.before()
	return r.Service.(election.TermResigner).ResignTerm(ctx, term)
}

// Supervise's result is decided when fn returns: if ctx was live then and
// the term intact, fn's result stands, also when ctx ends during the
// resign that follows (the work was done, or failed, before the end). An
// fn that returns after ctx ended may have stopped early: that is ctx's
// error.
func TestSuperviseResultDecidedWhenFnReturns(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		fnErr     error
		cancelIn  string // "resign": after fn returned; "fn": before
		want, not error
	}{
		{"nil, then ctx ended", nil, "resign", nil, context.Canceled},
		{"error, then ctx ended", boom, "resign", boom, context.Canceled},
		{"nil after ctx ended", nil, "fn", context.Canceled, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx, cancel := context.WithCancel(testCtx(t, 20*time.Second))
			defer cancel()
			newService := func(ctx context.Context) (election.Service, error) {
				s, err := f.newService(ctx)
				if err != nil {
					return nil, err
				}
				return resignHook{s, func() {
					if tc.cancelIn == "resign" {
						cancel()
					}
				}}, nil
			}
			err := election.Supervise(ctx, newService, "v", func(fnCtx context.Context, l election.Leadership) error {
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
			f.check(t)
		})
	}
}
