package etcdio_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// semPrefix returns a prefix no other test uses; when t ends, the record of
// its number of permits is removed.
func semPrefix(t testing.TB) string {
	prefix := prefixOf(t)
	t.Cleanup(func() {
		cli, err := embedded.NewClient(etcdtest.Endpoints())
		if err != nil {
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cli.Delete(ctx, prefix+etcdio.PermitsSuffix)
	})
	return prefix
}

func newSem(t testing.TB, cli *clientv3.Client, prefix string, n int, opts ...etcdio.Option) semaphore.Service {
	t.Helper()
	return testkit.ClosedAtEnd[semaphore.Service](t)(etcdio.NewSemaphore(cli, prefix, n, opts...))
}

func mustAcquire(t testing.TB, s semaphore.Service) semaphore.Grant {
	t.Helper()
	g, err := s.Acquire(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// acquireQueued starts s.Acquire on its own goroutine and returns once the
// semaphore's queue under prefix holds n keys, s's among them; the grant
// arrives on the channel (a zero Grant if Acquire failed, which fails t).
func acquireQueued(t *testing.T, s semaphore.Service, cli *clientv3.Client, prefix string, n int64) <-chan semaphore.Grant {
	t.Helper()
	got := make(chan semaphore.Grant, 1)
	go func() {
		g, err := s.Acquire(testCtx(t, 10*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- g
	}()
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("%d queued keys", n), func() bool { return countKeys(t, cli, prefix+"/q") == n })
	return got
}

// slotGuards is a resource's side of semaphore fencing: one guard per slot
// scope.
type slotGuards struct {
	mu     sync.Mutex
	guards map[string]*guard.Guard
}

func (s *slotGuards) check(g semaphore.Grant) error {
	s.mu.Lock()
	if s.guards == nil {
		s.guards = map[string]*guard.Guard{}
	}
	gd := s.guards[g.Scope()]
	if gd == nil {
		gd = guard.New()
		s.guards[g.Scope()] = gd
	}
	s.mu.Unlock()
	return gd.Check(g.Token())
}

// 32 owners contend for 4 permits: never more than 4 hold at once, no slot
// is held twice at once, and every slot's tokens only go up.
func TestSemaphoreBound(t *testing.T) {
	testkit.NoLeaks(t)
	const n, owners, rounds = 4, 32, 3
	prefix := semPrefix(t)
	clis := []*clientv3.Client{newClient(t), newClient(t), newClient(t), newClient(t)}
	var (
		mu       sync.Mutex
		holding  int
		most     int
		inSlot   = map[int]bool{}
		guards   slotGuards
		acquired int
		// shared is closed once n hold together; until then each holder
		// waits for it, so that sharing is shown however slowly the
		// permits are handed out (admissions follow one another: see
		// semService), not only when they happen to overlap.
		shared     = make(chan struct{})
		sharedOnce sync.Once
	)
	var wg sync.WaitGroup
	for i := range owners {
		s := newSem(t, clis[i%len(clis)], prefix, n)
		wg.Go(func() {
			for range rounds {
				err := semaphore.Do(testCtx(t, 30*time.Second), s, func(ctx context.Context, g semaphore.Grant) error {
					if g.Slot < 0 || g.Slot >= n {
						t.Errorf("slot %d out of 0..%d", g.Slot, n-1)
					}
					if err := guards.check(g); err != nil {
						t.Errorf("guard of %s rejected a current holder: %v", g.Scope(), err)
					}
					mu.Lock()
					holding++
					acquired++
					most = max(most, holding)
					if inSlot[g.Slot] {
						t.Errorf("slot %d held twice at once", g.Slot)
					}
					inSlot[g.Slot] = true
					if holding == n {
						sharedOnce.Do(func() { close(shared) })
					}
					mu.Unlock()
					select {
					case <-shared:
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
					}
					time.Sleep(time.Millisecond) // hold the permit a moment: work, not synchronisation
					mu.Lock()
					holding--
					inSlot[g.Slot] = false
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most > n {
		t.Fatalf("%d held at once, N = %d", most, n)
	}
	if acquired != owners*rounds {
		t.Fatalf("%d acquisitions, want %d", acquired, owners*rounds)
	}
	if most < n {
		t.Errorf("at most %d held at once, never all %d permits: they were not shared", most, n)
	}
	if k := countKeys(t, clis[0], prefix); k != 0 {
		t.Fatalf("%d keys left after every release", k)
	}
}

func TestSemaphoreTryAcquire(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	a, b, c := newSem(t, cli, prefix, 2), newSem(t, cli, prefix, 2), newSem(t, cli, prefix, 2)
	ctx := testCtx(t, 10*time.Second)
	ga, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ga.Slot == gb.Slot || gb.Token() <= ga.Token() {
		t.Fatalf("grants %+v and %+v: want distinct slots, increasing tokens", ga, gb)
	}
	if _, err := c.TryAcquire(ctx); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("third TryAcquire of 2 permits: %v, want ErrNoPermit", err)
	}
	if k := countKeys(t, cli, prefix+"/q"); k != 2 {
		t.Fatalf("%d queue keys after a failed TryAcquire, want 2", k)
	}
	if err := a.Release(ctx, ga); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, ga); !errors.Is(err, semaphore.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	gc, err := c.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gc.Slot != ga.Slot || gc.Token() <= gb.Token() {
		t.Fatalf("after a released slot %d: got %+v, want that slot with a higher token", ga.Slot, gc)
	}
}

// A waiter whose context ends returns ctx.Err() and leaves no key; the
// owners behind it still get their turn.
func TestSemaphoreCancelWhileWaiting(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	a := newSem(t, cli, prefix, 1)
	ga := mustAcquire(t, a)

	b := newSem(t, newClient(t), prefix, 1)
	bctx, cancelB := context.WithCancel(context.Background())
	bErr := make(chan error, 1)
	go func() { _, err := b.Acquire(bctx); bErr <- err }()
	testkit.Eventually(t, 5*time.Second, "b's key", func() bool { return countKeys(t, cli, prefix+"/q") == 2 })

	c := newSem(t, newClient(t), prefix, 1)
	cGot := acquireQueued(t, c, cli, prefix, 3)

	cancelB()
	if err := <-bErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire returned %v, want context.Canceled", err)
	}
	if k := countKeys(t, cli, prefix+"/q"); k != 2 {
		t.Fatalf("%d queue keys after the cancelled Acquire returned, want 2 (a and c)", k)
	}
	if err := a.Release(context.Background(), ga); err != nil {
		t.Fatal(err)
	}
	var gc semaphore.Grant
	select {
	case gc = <-cGot:
	case <-time.After(5 * time.Second):
		t.Fatal("c did not acquire after a released and b gave up")
	}
	if gc.Slot != 0 || gc.Token() <= ga.Token() {
		t.Fatalf("c got %+v after a's %+v", gc, ga)
	}
	if err := c.Release(context.Background(), gc); err != nil {
		t.Fatal(err)
	}
	if k := countKeys(t, cli, prefix); k != 0 {
		t.Fatalf("%d keys left after every release", k)
	}
}

// A holder whose key is deleted gets Lost; its permit goes to the waiter,
// which takes over its slot with a higher token, and the slot's guard then
// rejects the lost holder's token.
func TestSemaphoreLostHolder(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	a, c := newSem(t, cli, prefix, 2), newSem(t, cli, prefix, 2)
	events := a.Subscribe(testCtx(t, 10*time.Second))
	ga := mustAcquire(t, a)
	gc := mustAcquire(t, c)
	nextEvent(t, events) // Acquired

	b := newSem(t, newClient(t), prefix, 2)
	bGot := acquireQueued(t, b, cli, prefix, 3)

	var guards slotGuards
	if err := guards.check(ga); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(context.Background(), ga.Key); err != nil {
		t.Fatal(err)
	}
	if lost, ok := nextEvent(t, events).(primitives.Lost); !ok || lost.Created != ga.Created {
		t.Fatalf("want Lost for %s, got %#v", ga.Key, lost)
	}
	var gb semaphore.Grant
	select {
	case gb = <-bGot:
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the lost holder's permit")
	}
	if gb.Slot != ga.Slot || gb.Slot == gc.Slot {
		t.Fatalf("b got slot %d; the lost holder had %d, c holds %d", gb.Slot, ga.Slot, gc.Slot)
	}
	if err := guards.check(gb); err != nil {
		t.Fatal(err)
	}
	if err := guards.check(ga); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("lost holder's token %d after %d: %v, want ErrTokenStale", ga.Token(), gb.Token(), err)
	}
	if err := a.Release(context.Background(), ga); !errors.Is(err, semaphore.ErrNotHeld) {
		t.Fatalf("Release of the lost grant: %v, want ErrNotHeld", err)
	}
	if a.Err() != nil {
		t.Fatalf("service done after only its key was deleted: %v", a.Err())
	}
}

// A holder whose session ends frees its permit: the waiter acquires.
func TestSemaphoreSessionLost(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	a := newSem(t, cli, prefix, 1, etcdio.WithSession(sess))
	ga := mustAcquire(t, a)
	b := newSem(t, newClient(t), prefix, 1)
	bGot := acquireQueued(t, b, cli, prefix, 2)
	if _, err := cli.Revoke(context.Background(), sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a not done after its lease was revoked")
	}
	if !errors.Is(a.Err(), primitives.ErrLost) {
		t.Fatalf("a.Err() = %v, want ErrLost", a.Err())
	}
	select {
	case gb := <-bGot:
		if gb.Slot != ga.Slot || gb.Token() <= ga.Token() {
			t.Fatalf("b got %+v after a's %+v", gb, ga)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the permit of the lost session")
	}
}

// Users that disagree on N get ErrPermitMismatch and leave nothing; bad
// input is a clear error; RetireSemaphore frees the name for another N.
func TestSemaphorePermitMismatch(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	a := newSem(t, cli, prefix, 2)
	ga := mustAcquire(t, a)
	if _, err := etcdio.NewSemaphore(cli, prefix, 3); !errors.Is(err, semaphore.ErrPermitMismatch) {
		t.Fatalf("NewSemaphore with 3 after 2: %v, want ErrPermitMismatch", err)
	}
	for _, n := range []int{0, -1, 1 << 20} {
		if _, err := etcdio.NewSemaphore(cli, prefix, n); !errors.Is(err, etcdio.ErrInvalidArgument) {
			t.Errorf("NewSemaphore with %d permits: %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, err := etcdio.NewSemaphore(nil, prefix, 1); !errors.Is(err, etcdio.ErrInvalidArgument) {
		t.Errorf("NewSemaphore with a nil client: %v, want ErrInvalidArgument", err)
	}
	if k := countKeys(t, cli, prefix+"/q"); k != 1 {
		t.Fatalf("%d queue keys, want a's alone", k)
	}
	if err := etcdio.RetireSemaphore(context.Background(), cli, prefix); !errors.Is(err, etcdio.ErrInUse) {
		t.Fatalf("RetireSemaphore while held: %v, want ErrInUse", err)
	}
	if err := a.Release(context.Background(), ga); err != nil {
		t.Fatal(err)
	}
	if err := etcdio.RetireSemaphore(context.Background(), cli, prefix); err != nil {
		t.Fatal(err)
	}
	// a's record is gone: its next Acquire says so rather than guess N.
	if _, err := a.Acquire(testCtx(t, 5*time.Second)); !errors.Is(err, semaphore.ErrPermitMismatch) {
		t.Fatalf("Acquire after the name was retired: %v, want ErrPermitMismatch", err)
	}
	b := newSem(t, cli, prefix, 3)
	mustAcquire(t, b)
}

// TestSemaphoreConformance runs the suite's semaphore section against
// etcdio, with the hooks of the other sections extended to semaphores.
func TestSemaphoreConformance(t *testing.T) {
	testkit.NoLeaks(t)
	base := etcdBackend(t)
	admin := newClient(t)
	var sessions sync.Map // service -> *etcdio.Session
	b := conformance.SemaphoreBackend{Backend: base}
	b.NewSemaphore = func(t *testing.T, name string, n int) (semaphore.Service, error) {
		t.Helper()
		prefix := "/conformance/" + name
		t.Cleanup(func() { _, _ = admin.Delete(context.Background(), prefix+etcdio.PermitsSuffix) })
		cli := newClient(t)
		s, err := etcdio.NewSession(cli, etcdio.WithTTL(conformanceTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		svc, err := etcdio.NewSemaphore(cli, prefix, n, etcdio.WithSession(s))
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { svc.Close() })
		sessions.Store(svc, s)
		return svc, nil
	}
	own := func(svc any) (*etcdio.Session, bool) {
		s, ok := sessions.Load(svc)
		if !ok {
			return nil, false
		}
		return s.(*etcdio.Session), true
	}
	b.KillSession = func(t *testing.T, svc any) {
		t.Helper()
		s, ok := own(svc)
		if !ok {
			base.KillSession(t, svc)
			return
		}
		if _, err := admin.Revoke(context.Background(), s.LeaseID()); err != nil {
			t.Fatal(err)
		}
	}
	b.Pause = func(t *testing.T, svc any) func() {
		t.Helper()
		s, ok := own(svc)
		if !ok {
			return base.Pause(t, svc)
		}
		resume := make(chan struct{})
		testhook.PauseSession(s, resume)
		var once sync.Once
		return func() { once.Do(func() { close(resume) }) }
	}
	conformance.TestSemaphore(t, b)
}

// Services sharing one session are distinct owners; a Close on the shared
// session frees its permit at once, and its slot (whose claim outlives the
// Close until the lease ends) goes to the next owner.
func TestSemaphoreSharedSession(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	a := newSem(t, cli, prefix, 2, etcdio.WithSession(sess))
	b := newSem(t, cli, prefix, 2, etcdio.WithSession(sess))
	c := newSem(t, cli, prefix, 2, etcdio.WithSession(sess))
	ga, gb := mustAcquire(t, a), mustAcquire(t, b)
	if ga.Slot == gb.Slot {
		t.Fatalf("two owners on one session hold slot %d", ga.Slot)
	}
	ctx := testCtx(t, 10*time.Second)
	if _, err := c.TryAcquire(ctx); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire with both permits held on the same session: %v, want ErrNoPermit", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	gc, err := c.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a holder's Close: %v", err)
	}
	if gc.Slot != ga.Slot || gc.Token() <= gb.Token() {
		t.Fatalf("after the Close of slot %d's holder: %+v", ga.Slot, gc)
	}
	if err := etcdio.RetireSemaphore(ctx, cli, prefix); !errors.Is(err, etcdio.ErrInUse) {
		t.Fatalf("RetireSemaphore while held: %v, want ErrInUse", err)
	}
	for _, r := range []struct {
		s semaphore.Service
		g semaphore.Grant
	}{{b, gb}, {c, gc}} {
		if err := r.s.Release(ctx, r.g); err != nil {
			t.Fatal(err)
		}
	}
	if err := etcdio.RetireSemaphore(ctx, cli, prefix); err != nil {
		t.Fatal(err)
	}
	if k := countKeys(t, cli, prefix); k != 0 {
		t.Fatalf("%d keys left after RetireSemaphore", k)
	}
}
