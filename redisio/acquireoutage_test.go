package redisio_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

// TestAcquireBoundedByContextInOutage: an acquisition whose context ends
// while Redis does not answer (the client's ReadTimeout at go-redis's
// default, 5 s; the call's context 300 ms, past its deadline or
// canceled) returns soon after its context ends, well before the client's read times out, with an error wrapping
// the context's error; and once Redis answers again, what its script
// wrote when it landed after the caller gave up is withdrawn.
func TestAcquireBoundedByContextInOutage(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		// bound is how long after its start the call must have returned:
		// short of the client's ReadTimeout, generous for a loaded machine.
		bound = 3 * time.Second
	)
	lockOf := func(cli *redis.Client, name string) (lock.Service, error) { return redisio.NewLock(cli, name) }
	rwOf := func(cli *redis.Client, name string) (rwlock.Service, error) { return redisio.NewRWLock(cli, name) }
	semOf := func(cli *redis.Client, name string) (semaphore.Service, error) {
		return redisio.NewSemaphore(cli, name, 2)
	}
	locks := opens(lockOf, func(ctx context.Context, l lock.Service) error { _, err := l.Lock(ctx); return err })
	cases := []struct {
		name     string
		canceled bool // the context is canceled rather than past its deadline
		// open makes the primitive on cli and returns what acquires it.
		open func(cli *redis.Client, name string) (io.Closer, func(context.Context) error, error)
	}{
		{"lock", false, locks},
		{"lock canceled", true, locks},
		{"lock try", false, opens(lockOf, func(ctx context.Context, l lock.Service) error { _, err := l.TryLock(ctx); return err })},
		{"rwlock read", false, opens(rwOf, func(ctx context.Context, l rwlock.Service) error { _, err := l.RLock(ctx); return err })},
		{"rwlock write", false, opens(rwOf, func(ctx context.Context, l rwlock.Service) error { _, err := l.Lock(ctx); return err })},
		{"election", false, opens(func(cli *redis.Client, name string) (election.Service, error) { return redisio.NewElection(cli, name) },
			func(ctx context.Context, e election.Service) error { return e.Campaign(ctx, "v") })},
		{"semaphore", false, opens(semOf, func(ctx context.Context, m semaphore.Service) error { _, err := m.Acquire(ctx); return err })},
		{"semaphore try", false, opens(semOf, func(ctx context.Context, m semaphore.Service) error { _, err := m.TryAcquire(ctx); return err })},
	}
	r := testserver.StartRedis(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testkit.NoLeaks(t)
			name := "acquire-outage/" + c.name
			admin := newClient(t, r)
			px, cli := proxied(t, r, redis.Options{})
			p, acq, err := c.open(cli, name)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			// The link holds what is sent until it is unpaused: the
			// acquisition's script lands after its caller gave up.
			px.PauseTx()
			px.PauseRx()
			unpause := func() { px.UnpauseTx(); px.UnpauseRx() }
			defer unpause()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			want := context.DeadlineExceeded
			if c.canceled {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(timeout, cancel)
				want = context.Canceled
			}
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- acq(ctx) }()
			aerr := returnedWithin(t, done, start, bound, timeout, unpause)
			if !errors.Is(aerr, want) {
				t.Errorf("acquisition in an outage: %v, want an error wrapping %v", aerr, want)
			}
			unpause()
			lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
			defer lcancel()
			testkit.Eventually(t, 30*time.Second, "nothing left behind once Redis answers", func() bool {
				return len(leftBehindOf(lctx, admin, name)) == 0
			})
		})
	}
}

// TestWaiterGivesUpInOutage: a waiter whose context ends while Redis does
// not answer returns soon after, with its context's error, not once its
// withdrawal's requests give up (5 s); and once Redis answers again, its
// queued hold is gone.
func TestWaiterGivesUpInOutage(t *testing.T) {
	const (
		timeout = 1500 * time.Millisecond
		bound   = 4 * time.Second // short of the withdrawal's 5 s, generous for a loaded machine
		name    = "acquire-outage/waiter"
	)
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{})
	holder, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	waiter, err := redisio.NewLock(cli, name)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := waiter.Lock(ctx); done <- err }()
	lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
	defer lcancel()
	testkit.Eventually(t, 10*time.Second, "the waiter's hold queued", func() bool {
		return len(leftBehindOf(lctx, admin, name)) >= 2
	})
	px.PauseTx()
	px.PauseRx()
	unpause := func() { px.UnpauseTx(); px.UnpauseRx() }
	defer unpause()
	werr := returnedWithin(t, done, start, bound, timeout, unpause)
	if !errors.Is(werr, context.DeadlineExceeded) {
		t.Errorf("waiter in an outage: %v, want an error wrapping context.DeadlineExceeded", werr)
	}
	unpause()
	if err := holder.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "nothing left behind once Redis answers", func() bool {
		return len(leftBehindOf(lctx, admin, name)) == 0
	})
}

// TestCloseWaitsForEnqueueUnderWay: Close of a lock on a shared session,
// while its acquisition's enqueue is unanswered (the link holds it),
// returns only once that enqueue is answered and what it queued is
// withdrawn: the next owner's TryLock right after finds the lock free.
// Close returned as the acquisition left its request under way (half a
// second), and the hold it queued stood after Close had returned.
func TestCloseWaitsForEnqueueUnderWay(t *testing.T) {
	const name = "acquire-outage/close-enqueue"
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Bool
	px.WatchTx(func(b []byte) {
		if bytes.Contains(b, []byte(name+"/")) {
			sent.Store(true)
		}
	})
	px.PauseTx()
	unpause := sync.OnceFunc(px.UnpauseTx)
	defer unpause()
	locked := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); locked <- err }()
	testkit.Eventually(t, 10*time.Second, "the enqueue sent", sent.Load)
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	var cerr error
	select {
	case cerr = <-closed:
		t.Errorf("Close returned while its acquisition's enqueue was unanswered: %v", cerr)
		unpause()
	case <-time.After(2 * time.Second): // a negative check: longer than a caller's wait to leave a request
		unpause()
		cerr = <-closed
	}
	if cerr != nil {
		t.Errorf("Close: %v", cerr)
	}
	if err := <-locked; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("Lock: %v, want ErrClosed", err)
	}
	next, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := next.TryLock(ctx); err != nil {
		t.Errorf("TryLock right after Close returned: %v", err)
	}
}

// TestCloseOfWaiterOnSlowRedisLeavesNothing: Close of a waiter, while
// Redis answers slowly (each request sent 800 ms late, longer than a
// caller waits for its withdrawal before it leaves it under way), returns
// only once the waiter's key is gone: the next owner's TryLock, after the
// holder's release, finds the lock free.
func TestCloseOfWaiterOnSlowRedisLeavesNothing(t *testing.T) {
	const name = "acquire-outage/slow-close"
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	px, cli := proxied(t, r, redis.Options{})
	holder, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	held := leftBehindOf(ctx, admin, name) // the holder's keys
	slices.Sort(held)
	// On a session of its own Close waits for the session's helpers: the
	// waiter shares one.
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waiter, err := redisio.NewLock(cli, name, redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := waiter.Lock(ctx); done <- err }()
	testkit.Eventually(t, 10*time.Second, "the waiter's hold queued", func() bool {
		return len(leftBehindOf(ctx, admin, name)) > len(held)
	})
	px.DelayTx(800 * time.Millisecond)
	defer px.UndelayTx()
	if err := waiter.Close(); err != nil {
		t.Fatalf("Close of the waiter: %v", err)
	}
	left := leftBehindOf(ctx, admin, name)
	slices.Sort(left)
	if !slices.Equal(left, held) {
		t.Errorf("keys after the waiter's Close returned: %v, want the holder's alone: %v", left, held)
	}
	if err := <-done; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("the waiter's Lock: %v, want ErrClosed", err)
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := redisio.NewLock(admin, name)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := next.TryLock(ctx); err != nil {
		t.Errorf("TryLock after the waiter's Close and the holder's release: %v", err)
	}
}

// opens returns what makes a primitive with made and returns it with its
// acquisition, acq.
func opens[P io.Closer](made func(cli *redis.Client, name string) (P, error), acq func(context.Context, P) error) func(cli *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
	return func(cli *redis.Client, name string) (io.Closer, func(context.Context) error, error) {
		p, err := made(cli, name)
		if err != nil {
			return nil, nil, err
		}
		return p, func(ctx context.Context) error { return acq(ctx, p) }, nil
	}
}

// returnedWithin returns what the call begun at start, whose context
// ended after timeout, sent on done, failing t unless it came within
// bound; if not, it unpauses the link (unpause) and waits for it.
func returnedWithin(t *testing.T, done <-chan error, start time.Time, bound, timeout time.Duration, unpause func()) error {
	t.Helper()
	select {
	case err := <-done:
		t.Logf("returned after %v: %v", time.Since(start), err)
		return err
	case <-time.After(bound):
		t.Errorf("not returned %v after it began, its context ended after %v", bound, timeout)
		unpause()
		err := <-done
		t.Logf("returned after %v once Redis answered: %v", time.Since(start), err)
		return err
	}
}
