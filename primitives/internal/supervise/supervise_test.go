package supervise

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/primitives"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service is a primitive reduced to what the supervisor needs.
type service struct {
	id     int
	events *actor.Fanout[primitives.Event]
	done   chan struct{}
	mu     sync.Mutex
	err    error
	closed int
}

func (s *service) Subscribe(ctx context.Context) <-chan primitives.Event {
	return s.events.Subscribe(ctx)
}
func (s *service) Done() <-chan struct{} { return s.done }
func (s *service) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// end makes the service done with err, as a lost session or Close does.
func (s *service) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.done)
		s.events.Close()
	}
}

func (s *service) Close() error {
	s.mu.Lock()
	s.closed++
	s.mu.Unlock()
	s.end(primitives.ErrClosed)
	return nil
}

// factory builds services and remembers them.
type factory struct {
	mu    sync.Mutex
	built []*service
	fail  []error // errors to return, in order, before building
}

func (f *factory) new(context.Context) (*service, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fail) > 0 {
		err := f.fail[0]
		f.fail = f.fail[1:]
		return nil, err
	}
	s := &service{id: len(f.built) + 1, events: actor.NewFanout(primitives.Coalescable), done: make(chan struct{})}
	f.built = append(f.built, s)
	return s, nil
}

// allClosed checks that every service built was closed exactly once.
func (f *factory) allClosed(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.built {
		if s.closed != 1 {
			t.Errorf("service %d closed %d times, want 1", s.id, s.closed)
		}
	}
}

var errTermLost = fmt.Errorf("term lost: %w", primitives.ErrLost)

// fast keeps the tests' waits short.
var fast = WithBackoff(time.Millisecond, 4*time.Millisecond)

func TestFnNilEnds(t *testing.T) {
	var f factory
	terms := 0
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		terms++
		return Result{Ran: true, Began: time.Now()}
	}, []Option{fast})
	if err != nil || terms != 1 || len(f.built) != 1 {
		t.Fatalf("Run = %v after %d terms on %d services, want nil after 1 on 1", err, terms, len(f.built))
	}
	f.allClosed(t)
}

func TestFnErrorReturned(t *testing.T) {
	var f factory
	boom := errors.New("boom")
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		return Result{Ran: true, Began: time.Now(), FnErr: boom, Err: boom}
	}, []Option{fast})
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want fn's error", err)
	}
	f.allClosed(t)
}

// A lost hold on a live service is tried again on the same service; a lost
// session gets a new service. Either way fn's own error does not end it.
func TestLossRejoins(t *testing.T) {
	var f factory
	var attempts []int
	var terms []int // the service of each term
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		terms = append(terms, s.id)
		switch len(terms) {
		case 1: // the key alone was deleted: the service lives
			return Result{Ran: true, Began: time.Now(), FnErr: context.Canceled, Err: errors.Join(context.Canceled, errTermLost)}
		case 2: // the session was lost
			s.end(errTermLost)
			return Result{Ran: true, Began: time.Now(), Err: errTermLost}
		case 3: // suspended, for a service built to cancel there
			return Result{Ran: true, Began: time.Now(), Err: fmt.Errorf("hold suspended: %w", primitives.ErrSuspended)}
		case 4: // the campaign failed: the service ended before fn ran
			s.end(errTermLost)
			return Result{Err: errTermLost}
		}
		return Result{Ran: true, Began: time.Now()}
	}, []Option{fast, OnRetry(func(attempt int, err error) {
		if !errors.Is(err, primitives.ErrLost) && !errors.Is(err, primitives.ErrSuspended) {
			t.Errorf("OnRetry(%d, %v): want the loss", attempt, err)
		}
		attempts = append(attempts, attempt)
	})})
	if err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if want := []int{1, 1, 2, 2, 3}; fmt.Sprint(terms) != fmt.Sprint(want) {
		t.Errorf("terms ran on services %v, want %v", terms, want)
	}
	if want := []int{1, 2, 3, 4}; fmt.Sprint(attempts) != fmt.Sprint(want) {
		t.Errorf("OnRetry attempts %v, want %v", attempts, want)
	}
	f.allClosed(t)
}

func TestConstructorErrors(t *testing.T) {
	flaky := errors.New("etcd unreachable")
	f := factory{fail: []error{flaky, flaky}}
	var retried []error
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		return Result{Ran: true, Began: time.Now()}
	}, []Option{fast, OnRetry(func(_ int, err error) { retried = append(retried, err) })})
	if err != nil || len(retried) != 2 || !errors.Is(retried[0], flaky) {
		t.Fatalf("Run = %v after retries %v, want nil after two retries of the constructor's error", err, retried)
	}
	f.allClosed(t)

	bad := fmt.Errorf("bad prefix: %w", primitives.ErrInvalidArgument)
	f = factory{fail: []error{bad}}
	err = Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		t.Error("a term ran without a service")
		return Result{}
	}, []Option{fast})
	if !errors.Is(err, bad) {
		t.Fatalf("Run = %v, want the constructor's invalid-argument error", err)
	}

	nilIface := func(context.Context) (Service, error) { return nil, nil }
	err = Run(context.Background(), "test", nilIface, func(ctx context.Context, s Service) Result { return Result{} }, nil)
	if !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Run with a constructor returning nil, nil = %v, want ErrInvalidArgument", err)
	}
}

func TestBadArguments(t *testing.T) {
	term := func(ctx context.Context, s *service) Result { return Result{Ran: true, Began: time.Now()} }
	var f factory
	for name, opts := range map[string][]Option{
		"nil option":   {nil},
		"zero min":     {WithBackoff(0, time.Second)},
		"max < min":    {WithBackoff(time.Second, time.Millisecond)},
		"jitter > 1":   {WithJitter(1.5)},
		"jitter < 0":   {WithJitter(-0.1)},
		"jitter   NaN": {WithJitter(nan())},
	} {
		if err := Run(context.Background(), "test", f.new, term, opts); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: Run = %v, want ErrInvalidArgument", name, err)
		}
	}
	if err := Run[*service](context.Background(), "test", nil, term, nil); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("nil newService: Run = %v, want ErrInvalidArgument", err)
	}
	if len(f.built) != 0 {
		t.Errorf("%d services built despite bad arguments", len(f.built))
	}
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

// The context's end stops Run promptly, also in the middle of a long
// backoff, and closes the service.
func TestContextEnds(t *testing.T) {
	var f factory
	ctx, cancel := context.WithCancel(context.Background())
	retrying := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, "test", f.new, func(ctx context.Context, s *service) Result {
			return Result{Ran: true, Began: time.Now(), Err: errTermLost}
		}, []Option{WithBackoff(time.Hour, time.Hour), OnRetry(func(int, error) { close(retrying) })})
	}()
	<-retrying
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	f.allClosed(t)

	// fn's own error, if not the context's, is kept.
	boom := errors.New("boom")
	ctx, cancel = context.WithCancel(context.Background())
	err := Run(ctx, "test", f.new, func(ctx context.Context, s *service) Result {
		cancel()
		return Result{Ran: true, Began: time.Now(), FnErr: boom, CtxEnded: true, Err: boom}
	}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want context.Canceled and fn's error", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	err = Run(ctx, "test", f.new, func(ctx context.Context, s *service) Result {
		cancel()
		return Result{Ran: true, Began: time.Now(), FnErr: ctx.Err(), CtxEnded: true, Err: ctx.Err()}
	}, nil)
	if err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled alone", err)
	}
	// fn returned nil after ctx ended: it may have stopped early.
	ctx, cancel = context.WithCancel(context.Background())
	err = Run(ctx, "test", f.new, func(ctx context.Context, s *service) Result {
		cancel()
		return Result{Ran: true, Began: time.Now(), CtxEnded: true}
	}, nil)
	if err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled alone", err)
	}
	// fn returned while ctx was live, which ended during the release: fn's
	// result stands, nil or its error.
	for _, fnErr := range []error{nil, boom} {
		ctx, cancel = context.WithCancel(context.Background())
		err = Run(ctx, "test", f.new, func(ctx context.Context, s *service) Result {
			cancel()
			return Result{Ran: true, Began: time.Now(), FnErr: fnErr, Err: fnErr}
		}, nil)
		if err != fnErr {
			t.Fatalf("Run = %v, want fn's %v alone", err, fnErr)
		}
	}
	// Not when the hold was lost: that would have been retried.
	ctx, cancel = context.WithCancel(context.Background())
	err = Run(ctx, "test", f.new, func(ctx context.Context, s *service) Result {
		cancel()
		return Result{Ran: true, Began: time.Now(), Err: errTermLost}
	}, nil)
	if err != context.Canceled {
		t.Fatalf("Run = %v, want context.Canceled alone", err)
	}
	f.allClosed(t)
}

// OnEvent gets every service's events, in order, the last before Run
// returns.
func TestOnEventOrder(t *testing.T) {
	var f factory
	var got []string
	terms := 0
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		terms++
		s.events.Publish(primitives.Acquired{Key: fmt.Sprint(s.id), Created: int64(terms)})
		if terms < 3 {
			s.events.Publish(primitives.Lost{Key: fmt.Sprint(s.id), Created: int64(terms), Err: errTermLost})
			s.end(errTermLost)
			return Result{Ran: true, Began: time.Now(), Err: errTermLost}
		}
		s.events.Publish(primitives.Released{Key: fmt.Sprint(s.id), Created: int64(terms)})
		return Result{Ran: true, Began: time.Now()}
	}, []Option{fast, OnEvent(func(e primitives.Event) { got = append(got, fmt.Sprintf("%T", e)) })})
	if err != nil {
		t.Fatal(err)
	}
	want := "[primitives.Acquired primitives.Lost primitives.Acquired primitives.Lost primitives.Acquired primitives.Released]"
	if fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}
}

// The wait doubles from min, never exceeds max, and jitter only shortens it.
func TestDelay(t *testing.T) {
	c, err := build("test", []Option{WithBackoff(10*time.Millisecond, 100*time.Millisecond), WithJitter(0.5)})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 100; attempt++ {
		full := min(10*time.Millisecond<<min(attempt-1, 10), 100*time.Millisecond)
		for range 20 {
			d := c.delay(attempt)
			if d > full || d < full/2 {
				t.Fatalf("delay(%d) = %v, want within [%v, %v]", attempt, d, full/2, full)
			}
		}
	}
	c, _ = build("test", []Option{WithBackoff(time.Second, 1<<62), WithJitter(0)})
	if d := c.delay(1000); d != 1<<62 {
		t.Fatalf("delay with a huge max = %v, want the max", d)
	}
	c, _ = build("test", nil)
	if d := c.delay(1); d > DefaultMinBackoff || d < DefaultMinBackoff*8/10 {
		t.Fatalf("default first delay %v", d)
	}
}

// Waits are bounded: many failures in a row take about attempts * max.
func TestBackoffBounded(t *testing.T) {
	const attempts = 20
	f := factory{}
	for range attempts {
		f.fail = append(f.fail, errors.New("down"))
	}
	start := time.Now()
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		return Result{Ran: true, Began: time.Now()}
	}, []Option{WithBackoff(time.Millisecond, 5*time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > attempts*5*time.Millisecond+2*time.Second {
		t.Fatalf("%d failed attempts took %v, more than their bounded waits", attempts, took)
	}
	f.allClosed(t)
}

// The backoff starts again from its minimum after a term that lasted at
// least its maximum, and keeps growing after shorter ones.
func TestBackoffResetsAfterLongTerm(t *testing.T) {
	var f factory
	var attempts []int
	terms := 0
	err := Run(context.Background(), "test", f.new, func(ctx context.Context, s *service) Result {
		terms++
		began := time.Now()
		if terms == 3 {
			began = began.Add(-time.Hour) // a long term
		}
		if terms == 5 {
			return Result{Ran: true, Began: began}
		}
		return Result{Ran: true, Began: began, Err: errTermLost}
	}, []Option{fast, OnRetry(func(attempt int, _ error) { attempts = append(attempts, attempt) })})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[1 2 1 2]"; fmt.Sprint(attempts) != want {
		t.Fatalf("OnRetry attempts %v, want %s", attempts, want)
	}
}

// A service that newService returns along with an error is closed, never
// used: when Run retries, when it gives up on an invalid argument, and when
// ctx ended. A nil one (a typed nil pointer, here) is not touched.
func TestServiceReturnedWithErrorClosed(t *testing.T) {
	var f factory
	var failed []*service
	withError := func() *service {
		s, _ := f.new(context.Background())
		failed = append(failed, s)
		return s
	}
	flaky := errors.New("warm-up failed")
	bad := fmt.Errorf("bad option: %w", primitives.ErrInvalidArgument)
	calls := 0
	newService := func(ctx context.Context) (*service, error) {
		switch calls++; calls {
		case 1:
			return withError(), flaky
		case 2:
			return nil, flaky // a typed nil
		}
		return f.new(ctx)
	}
	var terms []int
	term := func(ctx context.Context, s *service) Result {
		terms = append(terms, s.id)
		return Result{Ran: true, Began: time.Now()}
	}
	if err := Run(context.Background(), "test", newService, term, []Option{fast}); err != nil {
		t.Fatalf("Run = %v, want nil after two retries", err)
	}
	if fmt.Sprint(terms) != "[2]" {
		t.Fatalf("terms ran on services %v, want [2]: never on one returned with an error", terms)
	}

	err := Run(context.Background(), "test", func(context.Context) (*service, error) { return withError(), bad }, term, []Option{fast})
	if !errors.Is(err, bad) {
		t.Fatalf("Run = %v, want the constructor's error", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = Run(ctx, "test", func(context.Context) (*service, error) { cancel(); return withError(), flaky }, term, []Option{fast})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if len(failed) != 3 {
		t.Fatalf("%d services returned with an error, want 3", len(failed))
	}
	// A nil pointer and no error is no Service either.
	err = Run(context.Background(), "test", func(context.Context) (*service, error) { return nil, nil }, term, nil)
	if !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Run with a constructor returning a nil *service and no error = %v, want ErrInvalidArgument", err)
	}
	f.allClosed(t)
}
