package etcdio_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/rwlock"
)

func newRWLock(t testing.TB, cli *clientv3.Client, prefix string, opts ...etcdio.Option) rwlock.Service {
	t.Helper()
	return testkit.ClosedAtEnd[rwlock.Service](t)(etcdio.NewRWLock(cli, prefix, opts...))
}

// acquireAsync runs acquire in the background; its grant arrives on the
// returned channel, or the test fails.
func acquireAsync(t *testing.T, acquire func(context.Context) (rwlock.Grant, error)) <-chan rwlock.Grant {
	ch := make(chan rwlock.Grant, 1)
	ctx := testCtx(t, 20*time.Second)
	go func() {
		g, err := acquire(ctx)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, primitives.ErrClosed) {
				t.Error(err)
			}
			return
		}
		ch <- g
	}()
	return ch
}

func recv(t *testing.T, ch <-chan rwlock.Grant, what string) rwlock.Grant {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(5 * time.Second):
		t.Fatalf("%s did not acquire", what)
	}
	return rwlock.Grant{}
}

func notYet(t *testing.T, ch <-chan rwlock.Grant, what string) {
	t.Helper()
	select {
	case g := <-ch:
		t.Fatalf("%s acquired too early: %+v", what, g)
	default:
	}
}

func keysUnder(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	return countKeys(t, cli, prefix)
}

func TestRWLockReadersShareWriterExcludes(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	r1, r2, r3 := newRWLock(t, newClient(t), prefix), newRWLock(t, newClient(t), prefix), newRWLock(t, newClient(t), prefix)
	w := newRWLock(t, newClient(t), prefix)

	g1, err := r1.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g2, err := r2.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g1.Mode != rwlock.Read || g2.Token() != g1.Token() {
		t.Fatalf("concurrent readers: %+v and %+v; want one token", g1, g2)
	}

	// A writer waits for the readers before it.
	wg := acquireAsync(t, w.Lock)
	testkit.Eventually(t, 5*time.Second, "writer's key", func() bool { return keysUnder(t, cli, prefix) == 3 })
	// A reader after a waiting writer waits too: no writer starvation.
	rg := acquireAsync(t, r3.RLock)
	testkit.Eventually(t, 5*time.Second, "late reader's key", func() bool { return keysUnder(t, cli, prefix) == 4 })
	if _, err := newRWLock(t, newClient(t), prefix).TryRLock(ctx); !errors.Is(err, rwlock.ErrRWLockTaken) {
		t.Fatalf("TryRLock with a writer waiting: %v", err)
	}
	if err := r1.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	notYet(t, wg, "writer (one reader still holds)")
	if err := r2.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	gw := recv(t, wg, "writer")
	if gw.Mode != rwlock.Write || gw.Token() <= g1.Token() {
		t.Fatalf("writer grant %+v after readers' token %d", gw, g1.Token())
	}
	notYet(t, rg, "reader behind the writer")
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g3 := recv(t, rg, "reader behind the writer")
	if g3.Token() <= gw.Token() {
		t.Fatalf("reader token %d not above the previous writer's %d", g3.Token(), gw.Token())
	}
	if err := r3.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := keysUnder(t, cli, prefix); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestRWLockMutualExclusion(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	var readers, writers atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 6; i++ {
		l := newRWLock(t, newClient(t), prefix)
		write := i%3 == 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 4; r++ {
				ctx := testCtx(t, 20*time.Second)
				if write {
					err := rwlock.DoWrite(ctx, l, func(context.Context, rwlock.Grant) error {
						if writers.Add(1) != 1 || readers.Load() != 0 {
							errs <- errors.New("writer not alone")
						}
						writers.Add(-1)
						return nil
					})
					if err != nil {
						errs <- err
					}
					continue
				}
				err := rwlock.DoRead(ctx, l, func(context.Context, rwlock.Grant) error {
					readers.Add(1)
					if writers.Load() != 0 {
						errs <- errors.New("reader inside with a writer")
					}
					readers.Add(-1)
					return nil
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestRWLockTokens(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	w1, w2 := newRWLock(t, newClient(t), prefix), newRWLock(t, newClient(t), prefix)
	ra, rb, rc := newRWLock(t, newClient(t), prefix), newRWLock(t, newClient(t), prefix), newRWLock(t, newClient(t), prefix)

	gw1, err := w1.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Two readers released by the same writer's Unlock share one token.
	cha, chb := acquireAsync(t, ra.RLock), acquireAsync(t, rb.RLock)
	testkit.Eventually(t, 5*time.Second, "readers' keys", func() bool { return keysUnder(t, cli, prefix) == 3 })
	if err := w1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	ga, gb := recv(t, cha, "reader a"), recv(t, chb, "reader b")
	if ga.Token() != gb.Token() || ga.Token() <= gw1.Token() {
		t.Fatalf("readers after writer %d got %d and %d; want one token above the writer's", gw1.Token(), ga.Token(), gb.Token())
	}
	// Unrelated writes move the revision on; a late reader still joins.
	for i := 0; i < 3; i++ {
		if _, err := cli.Put(ctx, prefixOf(t)+"-unrelated", "x"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ra.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	gc, err := rc.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gc.Token() != gb.Token() {
		t.Fatalf("late reader got %d, want the read epoch's %d", gc.Token(), gb.Token())
	}
	// A writer's token is above every token issued before it.
	chw := acquireAsync(t, w2.Lock)
	testkit.Eventually(t, 5*time.Second, "writer's key", func() bool { return keysUnder(t, cli, prefix) == 3 })
	if err := rb.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rc.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	gw2 := recv(t, chw, "second writer")
	if gw2.Token() <= gc.Token() {
		t.Fatalf("writer token %d not above readers' %d", gw2.Token(), gc.Token())
	}

	// One guard protects reads and writes through the handoffs; the first
	// writer, now a zombie, is rejected.
	g := guard.New()
	for _, tok := range []fencing.Token{gw1.Token(), ga.Token(), gb.Token(), gc.Token(), gw2.Token()} {
		if err := g.Check(tok); err != nil {
			t.Fatalf("token %d rejected in order: %v", tok, err)
		}
	}
	if err := g.Check(gw1.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("zombie writer's token %d accepted: %v", gw1.Token(), err)
	}
	if err := g.Check(ga.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("old reader's token accepted after the writer: %v", err)
	}
	if err := w2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The epoch key is the one key left behind, and it is outside the prefix.
	if n := keysUnder(t, cli, prefix); n != 0 {
		t.Fatalf("%d keys left under the prefix", n)
	}
	if resp, err := cli.Get(ctx, prefix+etcdio.EpochSuffix); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("epoch key: %v %v", resp, err)
	}
}

func TestRWLockTryAndNotHeld(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 10*time.Second)
	a, b := newRWLock(t, newClient(t), prefix), newRWLock(t, newClient(t), prefix)
	if err := a.RUnlock(ctx); !errors.Is(err, rwlock.ErrNotHeld) {
		t.Fatalf("RUnlock not held: %v", err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, rwlock.ErrNotHeld) {
		t.Fatalf("Unlock not held: %v", err)
	}
	gr, err := a.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, rwlock.ErrNotHeld) {
		t.Fatalf("Unlock while holding a read grant: %v", err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, rwlock.ErrRWLockTaken) {
		t.Fatalf("TryLock with a reader: %v", err)
	}
	if _, err := b.TryRLock(ctx); err != nil {
		t.Fatalf("TryRLock with only a reader: %v", err)
	}
	if err := b.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, gr); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, gr); !errors.Is(err, rwlock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	gw, err := b.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.TryRLock(ctx); !errors.Is(err, rwlock.ErrRWLockTaken) {
		t.Fatalf("TryRLock with a writer: %v", err)
	}
	if err := b.Release(ctx, gw); err != nil {
		t.Fatal(err)
	}
	if n := keysUnder(t, cli, prefix); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

func TestRWLockCancelAndLoss(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	w := newRWLock(t, newClient(t), prefix)
	gw, err := w.Lock(testCtx(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r := newRWLock(t, newClient(t), prefix)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := r.RLock(ctx); errc <- err }()
	testkit.Eventually(t, 5*time.Second, "reader's key", func() bool { return keysUnder(t, cli, prefix) == 2 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled RLock: %v", err)
	}
	if n := keysUnder(t, cli, prefix); n != 1 {
		t.Fatalf("%d keys after the cancelled RLock, want 1", n)
	}

	// Lease loss: DoWrite's context is cancelled and Lost is reported.
	events := w.Subscribe(testCtx(t, 10*time.Second))
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(gw.LeaseID)); err != nil {
		t.Fatal(err)
	}
	if lost, ok := nextEvent(t, events).(primitives.Lost); !ok || lost.Key != gw.Key || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("want Lost for %s, got %#v", gw.Key, lost)
	}
	<-w.Done()
	if !errors.Is(w.Err(), primitives.ErrLost) {
		t.Fatalf("Err = %v", w.Err())
	}

	r2 := newRWLock(t, newClient(t), prefix)
	var gr rwlock.Grant
	err = rwlock.DoRead(testCtx(t, 10*time.Second), r2, func(ctx context.Context, g rwlock.Grant) error {
		gr = g
		if _, err := cli.Delete(context.Background(), g.Key); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, primitives.ErrLost) || gr.Token() <= gw.Token() {
		t.Fatalf("DoRead with a lost grant: %v (grant %+v)", err, gr)
	}
}

func TestRWLockInteropRecipes(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	sess := etcdSession(t, cli)
	theirs := recipe.NewRWMutex(sess, prefix)
	ours := newRWLock(t, newClient(t), prefix)
	ctx := testCtx(t, 10*time.Second)

	// Their writer holds: our reader and writer wait.
	if err := theirs.Lock(); err != nil {
		t.Fatal(err)
	}
	if _, err := ours.TryRLock(ctx); !errors.Is(err, rwlock.ErrRWLockTaken) {
		t.Fatalf("TryRLock while recipes writer holds: %v", err)
	}
	ch := acquireAsync(t, ours.Lock)
	testkit.Eventually(t, 5*time.Second, "our writer's key", func() bool { return keysUnder(t, cli, prefix) == 2 })
	notYet(t, ch, "our writer")
	if err := theirs.Unlock(); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "our writer")

	// Our writer holds: their reader waits until we unlock.
	got := make(chan error, 1)
	go func() { got <- theirs.RLock() }()
	testkit.Eventually(t, 5*time.Second, "their reader's key", func() bool { return keysUnder(t, cli, prefix) == 2 })
	select {
	case err := <-got:
		t.Fatalf("recipes reader got in while our writer holds: %v", err)
	default:
	}
	if err := ours.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Readers share.
	if _, err := ours.TryRLock(ctx); err != nil {
		t.Fatalf("our reader beside theirs: %v", err)
	}
	if err := theirs.RUnlock(); err != nil {
		t.Fatal(err)
	}
	if err := ours.RUnlock(ctx); err != nil {
		t.Fatal(err)
	}
}
