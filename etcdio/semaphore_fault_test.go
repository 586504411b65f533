package etcdio_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// lostWithin waits for the Lost of the grant created at created on events.
func lostWithin(t *testing.T, events <-chan primitives.Event, created int64, d time.Duration) primitives.Lost {
	t.Helper()
	return testkit.NextWhere(t, events, d, func(l primitives.Lost) bool { return l.Created == created })
}

// notHeld fails t unless s says g is no longer held: s was told its hold
// ended.
func notHeld(t *testing.T, s semaphore.Service, g semaphore.Grant, what string) {
	t.Helper()
	if err := s.Release(context.Background(), g); !errors.Is(err, semaphore.ErrNotHeld) {
		t.Fatalf("%s: the first holder's Release of slot %d: %v, want ErrNotHeld (it still believed it held)", what, g.Slot, err)
	}
}

// A holder's slot claim deleted behind its back: the next Acquire never
// gets that slot while the holder believes it holds, the holder is told
// Lost within the stated bound, and a later holder of the slot has a higher
// token.
func TestSemaphoreClaimDeleted(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	a := newSem(t, cli, prefix, 2)
	events := a.Subscribe(testCtx(t, 20*time.Second))
	ga := mustAcquire(t, a)
	if _, err := cli.Delete(context.Background(), prefix+"/slot/"+strconv.Itoa(ga.Slot)); err != nil {
		t.Fatal(err)
	}
	b := newSem(t, newClient(t), prefix, 2)
	gb := mustAcquire(t, b)
	if gb.Slot == ga.Slot {
		notHeld(t, a, ga, "b got a's slot")
		if gb.Token() <= ga.Token() {
			t.Fatalf("b's token %d on slot %d after a's %d", gb.Token(), gb.Slot, ga.Token())
		}
	}
	lostWithin(t, events, ga.Created, 5*time.Second)
	if a.Err() != nil {
		t.Fatalf("a done after only its claim was deleted: %v", a.Err())
	}
	// a's permit and slot are free again: a waiter gets the slot, with a
	// higher token.
	c := newSem(t, newClient(t), prefix, 2)
	gc := mustAcquire(t, c)
	if gc.Slot != ga.Slot && gb.Slot != ga.Slot || gc.Token() <= ga.Token() {
		t.Fatalf("after a's loss: b %+v, c %+v, a had %+v", gb, gc, ga)
	}
	for _, r := range []struct {
		s semaphore.Service
		g semaphore.Grant
	}{{b, gb}, {c, gc}} {
		if err := r.s.Release(context.Background(), r.g); err != nil {
			t.Fatal(err)
		}
	}
	if k := countKeys(t, cli, prefix); k != 0 {
		t.Fatalf("%d keys left after every release", k)
	}
}

// The same with one permit and a waiter: the holder is told Lost, and only
// then the waiter holds the slot, with a higher token.
func TestSemaphoreClaimDeletedWaiterTakesOver(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	a := newSem(t, cli, prefix, 1)
	events := a.Subscribe(testCtx(t, 20*time.Second))
	ga := mustAcquire(t, a)
	b := newSem(t, newClient(t), prefix, 1)
	bGot := acquireQueued(t, b, cli, prefix, 2)
	if _, err := cli.Delete(context.Background(), prefix+"/slot/0"); err != nil {
		t.Fatal(err)
	}
	lostWithin(t, events, ga.Created, 5*time.Second)
	var gb semaphore.Grant
	select {
	case gb = <-bGot:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the permit of the holder whose claim was deleted")
	}
	notHeld(t, a, ga, "after b's grant")
	if gb.Slot != 0 || gb.Token() <= ga.Token() {
		t.Fatalf("b got %+v after a's %+v", gb, ga)
	}
}

// A holder's queue key deleted while its session is paused: its claim keeps
// the slot, so the waiter gets it only after the holder, resumed, was told
// Lost.
func TestSemaphoreQueueKeyDeletedWhilePaused(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	a := newSem(t, cli, prefix, 1, etcdio.WithSession(sess))
	events := a.Subscribe(testCtx(t, 20*time.Second))
	ga := mustAcquire(t, a)
	b := newSem(t, newClient(t), prefix, 1)
	bGot := acquireQueued(t, b, cli, prefix, 2)
	resume := make(chan struct{})
	testhook.PauseSession(sess, resume)
	var once sync.Once
	unpause := func() { once.Do(func() { close(resume) }) }
	t.Cleanup(unpause)
	if _, err := cli.Delete(context.Background(), ga.Key); err != nil {
		t.Fatal(err)
	}
	select {
	case gb := <-bGot:
		t.Fatalf("b got %+v while a, paused, was not told its hold %+v ended", gb, ga)
	case <-time.After(500 * time.Millisecond): // a negative check, not synchronisation
	}
	unpause()
	lostWithin(t, events, ga.Created, 5*time.Second)
	var gb semaphore.Grant
	select {
	case gb = <-bGot:
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the permit after a was told Lost")
	}
	notHeld(t, a, ga, "after b's grant")
	if gb.Slot != ga.Slot || gb.Token() <= ga.Token() {
		t.Fatalf("b got %+v after a's %+v", gb, ga)
	}
}

// Many Acquires with deadlines of 0.5 to 5 ms (and, so that some end
// mid-claim on a slower machine, every other one up to 30 ms) on a
// contended semaphore, on one shared session: each returns its context's
// error (compared with ==) or a grant, and once all are done nothing of
// theirs is left under the prefix.
func TestSemaphoreShortDeadlinesLeaveNothing(t *testing.T) {
	testkit.NoLeaks(t)
	const n, waiters, tries = 2, 6, 40
	prefix := semPrefix(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	stop := make(chan struct{})
	var holders sync.WaitGroup
	for range n {
		h := newSem(t, newClient(t), prefix, n)
		holders.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				g, err := h.Acquire(testCtx(t, 20*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				if err := h.Release(context.Background(), g); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, expired := 0, 0
	for range waiters {
		s := newSem(t, cli, prefix, n, etcdio.WithSession(sess))
		wg.Go(func() {
			for i := range tries {
				d := 500*time.Microsecond + rand.N(4500*time.Microsecond)
				if i%2 == 1 {
					d = 5*time.Millisecond + rand.N(25*time.Millisecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), d)
				g, err := s.Acquire(ctx)
				cancel()
				switch {
				case err == nil:
					mu.Lock()
					granted++
					mu.Unlock()
					if err := s.Release(context.Background(), g); err != nil {
						t.Error(err)
						return
					}
				case err == context.DeadlineExceeded: //nolint:errorlint // the contract: ctx.Err() itself
					mu.Lock()
					expired++
					mu.Unlock()
				default:
					t.Errorf("Acquire with a %v deadline: %v, want a grant or context.DeadlineExceeded itself", d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	holders.Wait()
	t.Logf("%d granted, %d expired", granted, expired)
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		t.Errorf("key %s = %q left after every Acquire ended", kv.Key, kv.Value)
	}
}

// A Release that finds its queue key deleted by someone else (before the
// hold's watch told the holder) still frees its slot: its claim goes with
// the release, so the next owner takes the slot at once. Before, the
// release's delete of the claim was conditional on the queue key, and the
// claim stayed under the live lease until its patience ran out (a TTL).
func TestSemaphoreReleaseAfterQueueKeyDeleted(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := semPrefix(t)
	cli := newClient(t)
	a := newSem(t, cli, prefix, 1)
	ga := mustAcquire(t, a)
	if _, err := cli.Delete(ctx, ga.Key); err != nil {
		t.Fatal(err)
	}
	_ = a.Release(ctx, ga) // ErrNotHeld, or nil if the watch was first
	deadline := time.Now().Add(3 * time.Second)
	for countKeys(t, cli, prefix+"/slot") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the slot claim of %+v is still there 3 s after its Release", ga)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
