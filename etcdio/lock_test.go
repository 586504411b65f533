package etcdio_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

func newLock(t testing.TB, cli *clientv3.Client, prefix string, opts ...etcdio.Option) lock.Service {
	t.Helper()
	return testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, prefix, opts...))
}

func mustLock(t testing.TB, l lock.Service) lock.Grant {
	t.Helper()
	g, err := l.Lock(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestLockMutualExclusion(t *testing.T) {
	testkit.NoLeaks(t)
	const services, rounds = 8, 5
	prefix := prefixOf(t)
	var inside atomic.Int32
	var mu sync.Mutex
	var tokens []fencing.Token
	var wg sync.WaitGroup
	errs := make(chan error, services)
	for i := 0; i < services; i++ {
		l := newLock(t, newClient(t), prefix)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				g, err := l.Lock(testCtx(t, 20*time.Second))
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- errors.New("two holders inside the critical section")
				}
				mu.Lock()
				tokens = append(tokens, g.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(tokens) != services*rounds {
		t.Fatalf("%d acquisitions, want %d", len(tokens), services*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d: tokens must strictly increase across holders", tokens[i], tokens[i-1])
		}
	}
	if n := countKeys(t, newClient(t), prefix); n != 0 {
		t.Fatalf("%d keys left behind", n)
	}
}

func TestLockFIFO(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	holder := newLock(t, cli, prefix)
	mustLock(t, holder)
	const waiters = 4
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		l := newLock(t, newClient(t), prefix)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Lock(testCtx(t, 10*time.Second)); err != nil {
				t.Error(err)
				return
			}
			order <- i
			if err := l.Unlock(context.Background()); err != nil {
				t.Error(err)
			}
		}()
		// Queue them one by one: waiter i's key exists before i+1 starts.
		testkit.Eventually(t, 5*time.Second, "waiter's key", func() bool { return countKeys(t, cli, prefix) == int64(i+2) })
	}
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("waiter %d acquired in place %d", got, want)
		}
		want++
	}
}

func TestTryLock(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	a, b := newLock(t, cli, prefix), newLock(t, newClient(t), prefix)
	ctx := testCtx(t, 10*time.Second)
	g, err := a.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a free lock: %v", err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock on a held lock: %v, want ErrLockTaken", err)
	}
	if _, err := a.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock by the holder itself: %v, want ErrLockTaken", err)
	}
	if n := countKeys(t, cli, prefix); n != 1 {
		t.Fatalf("%d keys after failed TryLocks, want only the holder's", n)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx); err != nil {
		t.Fatalf("TryLock after release: %v", err)
	}
}

func TestUnlockNotHeld(t *testing.T) {
	testkit.NoLeaks(t)
	l := newLock(t, newClient(t), prefixOf(t))
	ctx := testCtx(t, 10*time.Second)
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of a free lock: %v, want ErrNotHeld", err)
	}
	g1 := mustLock(t, l)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	g2 := mustLock(t, l)
	if g2.Token() <= g1.Token() || g2.Key == g1.Key {
		t.Fatalf("relock reused a key or token: %+v then %+v", g1, g2)
	}
	// A retried Release of the first grant must not free the second.
	if err := l.Release(ctx, g1); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of an old grant: %v, want ErrNotHeld", err)
	}
	if _, err := newLock(t, newClient(t), prefixOf(t)).TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("second grant no longer held after a stale Release: %v", err)
	}
	if err := l.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
}

func TestLockCancelWhileWaiting(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	a := newLock(t, cli, prefix)
	mustLock(t, a)

	b := newLock(t, newClient(t), prefix)
	bctx, cancelB := context.WithCancel(context.Background())
	bErr := make(chan error, 1)
	go func() { _, err := b.Lock(bctx); bErr <- err }()
	testkit.Eventually(t, 5*time.Second, "b's key", func() bool { return countKeys(t, cli, prefix) == 2 })

	c := newLock(t, newClient(t), prefix)
	cGot := make(chan lock.Grant, 1)
	go func() {
		g, err := c.Lock(testCtx(t, 10*time.Second))
		if err != nil {
			t.Error(err)
		}
		cGot <- g
	}()
	testkit.Eventually(t, 5*time.Second, "c's key", func() bool { return countKeys(t, cli, prefix) == 3 })

	cancelB()
	if err := <-bErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock returned %v, want context.Canceled", err)
	}
	if n := countKeys(t, cli, prefix); n != 2 {
		t.Fatalf("%d keys after the cancelled Lock returned, want 2 (a and c)", n)
	}
	if err := a.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-cGot:
		if g.Key == "" {
			t.Fatal("c did not acquire")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("c did not acquire after a unlocked and b gave up")
	}
}

func TestLockCloseWhileHolding(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	a, err := etcdio.NewLock(newClient(t), prefix, etcdio.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mustLock(t, a)
	b := newLock(t, newClient(t), prefix, etcdio.WithTTL(10*time.Second))
	got := make(chan error, 1)
	go func() { _, err := b.Lock(testCtx(t, 10*time.Second)); got <- err }()
	testkit.Eventually(t, 5*time.Second, "b's key", func() bool { return countKeys(t, newClient(t), prefix) == 2 })
	start := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("b acquired %v after a's Close, want within 1s (not the 10s TTL)", d)
	}
	if !errors.Is(a.Err(), primitives.ErrClosed) {
		t.Fatalf("Err after Close: %v", a.Err())
	}
	if _, err := a.Lock(context.Background()); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Lock after Close: %v, want ErrClosed", err)
	}
	if err := a.Close(); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("second Close: %v, want an error wrapping ErrClosed", err)
	}
}

func TestLockLeaseRevoked(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	l := newLock(t, cli, prefixOf(t))
	events := l.Subscribe(testCtx(t, 10*time.Second))

	fnCtxDone := make(chan error, 1)
	acquired := make(chan lock.Grant, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- lock.Do(testCtx(t, 10*time.Second), l, func(ctx context.Context, g lock.Grant) error {
			acquired <- g
			<-ctx.Done()
			fnCtxDone <- context.Cause(ctx)
			return nil
		})
	}()
	g := <-acquired
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(g.LeaseID)); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, events); e != (primitives.Acquired{Key: g.Key, Token: g.Token(), Created: g.Created}) {
		t.Fatalf("first event %#v, want Acquired", e)
	}
	lost, ok := nextEvent(t, events).(primitives.Lost)
	if !ok || lost.Key != g.Key || lost.Token != g.Token() || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("event %#v, want Lost for %s wrapping ErrLost", lost, g.Key)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the lease was revoked")
	}
	if !errors.Is(l.Err(), primitives.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", l.Err())
	}
	if cause := <-fnCtxDone; !errors.Is(cause, primitives.ErrLost) {
		t.Fatalf("Do's context cause %v, want ErrLost", cause)
	}
	if err := <-doErr; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do returned %v, want an error wrapping ErrLost", err)
	}
	if _, err := l.Lock(context.Background()); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Lock after loss: %v, want ErrLost", err)
	}
}

func nextEvent(t *testing.T, ch <-chan primitives.Event) primitives.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return nil
}

func TestLockKeyDeletedByOther(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	l := newLock(t, cli, prefixOf(t))
	events := l.Subscribe(testCtx(t, 10*time.Second))
	g := mustLock(t, l)
	nextEvent(t, events) // Acquired
	if _, err := cli.Delete(context.Background(), g.Key); err != nil {
		t.Fatal(err)
	}
	if lost, ok := nextEvent(t, events).(primitives.Lost); !ok || lost.Key != g.Key {
		t.Fatalf("want Lost for %s, got %#v", g.Key, lost)
	}
	if l.Err() != nil {
		t.Fatalf("service done after only its key was deleted: %v", l.Err())
	}
	g2 := mustLock(t, l)
	if g2.Token() <= g.Token() {
		t.Fatalf("token went back: %d after %d", g2.Token(), g.Token())
	}
}

func TestLockInteropConcurrencyMutex(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	sess := etcdSession(t, cli)
	mu := concurrency.NewMutex(sess, prefix)
	l := newLock(t, newClient(t), prefix)
	ctx := testCtx(t, 10*time.Second)

	g := mustLock(t, l)
	if err := mu.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock while disco holds: %v, want ErrLocked", err)
	}
	got := make(chan error, 1)
	go func() { got <- mu.Lock(ctx) }()
	testkit.Eventually(t, 5*time.Second, "mutex key", func() bool { return countKeys(t, cli, prefix) == 2 })
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("disco TryLock while Mutex holds: %v, want ErrLockTaken", err)
	}
	waited := make(chan lock.Grant, 1)
	go func() { g, _ := l.Lock(ctx); waited <- g }()
	testkit.Eventually(t, 5*time.Second, "disco key", func() bool { return countKeys(t, cli, prefix) == 2 })
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if g2 := <-waited; g2.Token() <= g.Token() {
		t.Fatalf("grant after Mutex %+v", g2)
	}
}

func TestLockSharedSession(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	s, err := etcdio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p := prefixOf(t)
	a := newLock(t, cli, p+"/a", etcdio.WithSession(s))
	b := newLock(t, cli, p+"/b", etcdio.WithSession(s))
	ga, gb := mustLock(t, a), mustLock(t, b)
	if ga.LeaseID != int64(s.LeaseID()) || gb.LeaseID != ga.LeaseID {
		t.Fatalf("grants not on the shared lease: %x %x %x", ga.LeaseID, gb.LeaseID, s.LeaseID())
	}
	// Two services on one session and one prefix still exclude each other.
	c := newLock(t, cli, p+"/a", etcdio.WithSession(s))
	if _, err := c.TryLock(testCtx(t, 5*time.Second)); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("second service on the same session and prefix: %v, want ErrLockTaken", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil {
		t.Fatalf("closing a lock ended the shared session: %v", s.Err())
	}
	if n := countKeys(t, cli, p+"/a"); n != 0 {
		t.Fatalf("%d keys left under a after its Close", n)
	}
	if _, err := c.TryLock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("lock a still taken after its holder closed: %v", err)
	}
	if err := b.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestLockBadInput(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	closed, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	leases := func() int {
		resp, err := cli.Lease.Leases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	before := leases()
	for name, mk := range map[string]func() (lock.Service, error){
		"nil client":     func() (lock.Service, error) { return etcdio.NewLock(nil, "p") },
		"closed client":  func() (lock.Service, error) { return etcdio.NewLock(closed, "p") },
		"empty prefix":   func() (lock.Service, error) { return etcdio.NewLock(cli, "") },
		"zero TTL":       func() (lock.Service, error) { return etcdio.NewLock(cli, "p", etcdio.WithTTL(0)) },
		"fractional TTL": func() (lock.Service, error) { return etcdio.NewLock(cli, "p", etcdio.WithTTL(1500*time.Millisecond)) },
		"nil option":     func() (lock.Service, error) { return etcdio.NewLock(cli, "p", nil) },
	} {
		l, err := mk()
		if !errors.Is(err, etcdio.ErrInvalidArgument) || l != nil {
			t.Errorf("%s: got %v, %v; want an error wrapping ErrInvalidArgument", name, l, err)
		}
	}
	// Bad input is refused before anything is written: no lease, no key.
	if after := leases(); after != before {
		t.Fatalf("bad input left %d leases behind", after-before)
	}
	if n := countKeys(t, cli, "p"); n != 0 {
		t.Fatalf("bad input left %d keys", n)
	}
}

// TestGuardRejectsPreviousHolder is the three-party contract end to end: the
// holder after a handoff is admitted, the previous holder is not.
func TestGuardRejectsPreviousHolder(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	g := guard.New()
	a, b := newLock(t, newClient(t), prefix), newLock(t, newClient(t), prefix)
	ga := mustLock(t, a)
	if err := g.Check(ga.Token()); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	gb := mustLock(t, b)
	if err := g.Check(gb.Token()); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(ga.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("previous holder's token %d after %d: %v, want ErrTokenStale", ga.Token(), gb.Token(), err)
	}
}

// TestLockWaiterSessionLost: a waiter whose own lease is revoked stops
// waiting with ErrLost within half a TTL (etcd issue 19597: etcd's Mutex
// waits on forever), leaving nothing behind. It notices from the watch of
// its own keys, which a wait opens after a quarter of the TTL (see
// watchOwnSoon), or from the keepalive.
func TestLockWaiterSessionLost(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	holder := newLock(t, cli, prefix)
	mustLock(t, holder)
	const ttl = 4 * time.Second
	waiter := newLock(t, newClient(t), prefix, etcdio.WithTTL(ttl))
	errc := make(chan error, 1)
	go func() { _, err := waiter.Lock(testCtx(t, 20*time.Second)); errc <- err }()
	testkit.Eventually(t, 5*time.Second, "waiter's key", func() bool { return countKeys(t, cli, prefix) == 2 })
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, primitives.ErrLost) {
			t.Fatalf("waiting Lock returned %v, want ErrLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter still waiting 5s after its lease was revoked")
	}
	if d := time.Since(start); d > ttl/2 {
		t.Fatalf("waiter noticed its lost lease after %v, more than half its TTL of %v", d, ttl)
	}
	if n := countKeys(t, cli, prefix); n != 1 {
		t.Fatalf("%d keys, want only the holder's", n)
	}
}

// A waiter whose blocker is deleted after the waiter's key is written but
// before its watch of the blocker opens still holds: the watch opens at a
// revision after the delete, so the waiter reads once and finds nobody
// ahead. (A waiter skips that read only when etcd confirms its watch at a
// revision no later than its own key's creation.)
func TestWaiterWhoseBlockerGoesBeforeItsWatchOpens(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	holder := newLock(t, cli, prefix)
	mustLock(t, holder)
	wcli := newClient(t)
	s := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(wcli))
	waiter := newLock(t, wcli, prefix, etcdio.WithSession(s))

	// The waiter's loop stops at its next step: its Lock writes its key on
	// the caller's goroutine, then waits for the loop to open the watch.
	resume := make(chan struct{})
	testhook.PauseSession(s, resume)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(testCtx(t, 20*time.Second))
		got <- err
	}()
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool { return countKeys(t, cli, prefix) == 2 })
	if err := holder.Unlock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	close(resume)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never held: its blocker went before its watch opened")
	}
	if err := waiter.Unlock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}
