package etcdio_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
)

func newBarrier(t testing.TB, cli *clientv3.Client, key string) barrier.Barrier {
	t.Helper()
	b, err := etcdio.NewBarrier(cli, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Delete(context.Background(), key) })
	return b
}

func newDoubleBarrier(t testing.TB, cli *clientv3.Client, key string, count int, opts ...etcdio.Option) barrier.DoubleBarrier {
	t.Helper()
	return testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(etcdio.NewDoubleBarrier(cli, key, count, opts...))
}

// stillBlocked fails t if ch delivers within a short while: a negative check that
// a blocked call stays blocked, not synchronisation.
func stillBlocked(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

func within(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// Eight parties wait on a held barrier; one gives up mid-way; Release lets
// the other seven through.
func TestBarrierEightParties(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	clis := []*clientv3.Client{newClient(t), newClient(t)}
	b := newBarrier(t, clis[0], key)
	ctx := testCtx(t, 20*time.Second)
	if err := b.Wait(ctx); err != nil {
		t.Fatalf("Wait on a barrier never held: %v", err)
	}
	if err := b.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(ctx); !errors.Is(err, barrier.ErrHeld) {
		t.Fatalf("second Hold: %v, want ErrHeld", err)
	}
	const parties = 8
	errs := make(chan error, parties)
	// Two parties die mid-way: one gives up (its context ends), one's
	// process goes (its client is closed).
	victimCtx, kill := context.WithCancel(ctx)
	victim, gone := make(chan error, 1), make(chan error, 1)
	goneCli := newClient(t)
	for i := range parties {
		switch i {
		case 0:
			p := newBarrier(t, clis[0], key)
			go func() { victim <- p.Wait(victimCtx) }()
		case 1:
			p := newBarrier(t, goneCli, key)
			go func() { gone <- p.Wait(ctx) }()
		default:
			p := newBarrier(t, clis[i%2], key)
			go func() { errs <- p.Wait(ctx) }()
		}
	}
	stillBlocked(t, errs, "Wait on a held barrier")
	kill()
	if err := within(t, victim, "the cancelled Wait"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v, want context.Canceled", err)
	}
	stillBlocked(t, gone, "Wait on a held barrier")
	goneCli.Close()
	if err := within(t, gone, "the Wait of a closed client"); !errors.Is(err, etcdio.ErrClientClosed) {
		t.Fatalf("Wait whose client was closed: %v, want ErrClientClosed", err)
	}
	stillBlocked(t, errs, "Wait on a held barrier")
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range parties - 2 {
		if err := within(t, errs, "Wait after Release"); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Release(ctx); !errors.Is(err, barrier.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
}

// disco's barrier and etcd's recipes.Barrier on one key are one barrier.
func TestBarrierInteropRecipe(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	ours := newBarrier(t, cli, key)
	theirs := recipe.NewBarrier(cli, key)
	ctx := testCtx(t, 20*time.Second)

	if err := theirs.Hold(); err != nil {
		t.Fatal(err)
	}
	if err := ours.Hold(ctx); !errors.Is(err, barrier.ErrHeld) {
		t.Fatalf("Hold of a barrier the recipe holds: %v, want ErrHeld", err)
	}
	done := make(chan error, 1)
	go func() { done <- ours.Wait(ctx) }()
	stillBlocked(t, done, "Wait on the recipe's held barrier")
	if err := theirs.Release(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, done, "Wait after the recipe's Release"); err != nil {
		t.Fatal(err)
	}

	if err := ours.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { done <- theirs.Wait() }()
	stillBlocked(t, done, "the recipe's Wait on our held barrier")
	if err := ours.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, done, "the recipe's Wait after our Release"); err != nil {
		t.Fatal(err)
	}
}

// Eight parties enter together; one's session is lost before it leaves; the
// other seven leave together without waiting for it, and nothing is left.
func TestDoubleBarrierEightParties(t *testing.T) {
	testkit.NoLeaks(t)
	const parties = 8
	key := prefixOf(t)
	clis := []*clientv3.Client{newClient(t), newClient(t)}
	sess, err := etcdio.NewSession(clis[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	ps := make([]barrier.DoubleBarrier, parties)
	for i := range ps {
		var opts []etcdio.Option
		if i == 0 {
			opts = append(opts, etcdio.WithSession(sess))
		}
		ps[i] = newDoubleBarrier(t, clis[i%2], key, parties, opts...)
	}
	ctx := testCtx(t, 20*time.Second)
	run := func(f func(barrier.DoubleBarrier) error, who []barrier.DoubleBarrier) {
		t.Helper()
		errs := make([]error, len(who))
		var wg sync.WaitGroup
		for i, p := range who {
			wg.Go(func() { errs[i] = f(p) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	// The first seven wait in Enter for the eighth.
	entered := make(chan error, parties)
	for _, p := range ps[1:] {
		go func() { entered <- p.Enter(ctx) }()
	}
	stillBlocked(t, entered, "Enter with 7 of 8 parties")
	if err := ps[0].Enter(ctx); err != nil {
		t.Fatal(err)
	}
	for range parties - 1 {
		if err := within(t, entered, "Enter"); err != nil {
			t.Fatal(err)
		}
	}
	// The victim dies mid-way.
	if _, err := clis[0].Revoke(context.Background(), sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	if err := ps[0].Leave(ctx); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Leave of a lost party: %v, want ErrLost", err)
	}
	select {
	case <-ps[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the victim's party not done after its lease was revoked")
	}
	run(func(p barrier.DoubleBarrier) error { return p.Leave(ctx) }, ps[1:])
	if n := countKeys(t, clis[0], key); n != 0 {
		t.Fatalf("%d keys left after every party left", n)
	}
}

// disco's parties and a recipes.DoubleBarrier party meet in one barrier.
func TestDoubleBarrierInteropRecipe(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	a, b := newDoubleBarrier(t, cli, key, 3), newDoubleBarrier(t, newClient(t), key, 3)
	theirs := recipe.NewDoubleBarrier(etcdSession(t, cli), key, 3)
	ctx := testCtx(t, 20*time.Second)
	errs := make(chan error, 3)
	go func() { errs <- a.Enter(ctx) }()
	go func() { errs <- b.Enter(ctx) }()
	stillBlocked(t, errs, "Enter with 2 of 3 parties")
	go func() { errs <- theirs.Enter() }()
	for range 3 {
		if err := within(t, errs, "Enter"); err != nil {
			t.Fatal(err)
		}
	}
	go func() { errs <- a.Leave(ctx) }()
	go func() { errs <- theirs.Leave() }()
	stillBlocked(t, errs, "Leave with 2 of 3 parties")
	go func() { errs <- b.Leave(ctx) }()
	for range 3 {
		if err := within(t, errs, "Leave"); err != nil {
			t.Fatal(err)
		}
	}
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys left after every party left", n)
	}
}

// A cancelled Enter leaves no key; a full barrier refuses more parties;
// Leave needs Enter; bad input is an error.
func TestDoubleBarrierCancelAndMisuse(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	a := newDoubleBarrier(t, cli, key, 2)
	actx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Enter(actx) }()
	testkit.Eventually(t, 5*time.Second, "a's key", func() bool { return countKeys(t, cli, key) == 1 })
	cancel()
	if err := within(t, done, "the cancelled Enter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Enter: %v, want context.Canceled", err)
	}
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys after a cancelled Enter", n)
	}
	ctx := testCtx(t, 10*time.Second)
	if err := a.Leave(ctx); !errors.Is(err, barrier.ErrNotEntered) {
		t.Fatalf("Leave before Enter: %v, want ErrNotEntered", err)
	}

	b, c := newDoubleBarrier(t, cli, key, 2), newDoubleBarrier(t, cli, key, 2)
	go func() { done <- b.Enter(ctx) }()
	if err := a.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, done, "Enter"); err != nil {
		t.Fatal(err)
	}
	if err := c.Enter(ctx); !errors.Is(err, barrier.ErrFull) {
		t.Fatalf("Enter of a third party of 2: %v, want ErrFull", err)
	}
	if err := a.Enter(ctx); !errors.Is(err, barrier.ErrEntered) {
		t.Fatalf("second Enter: %v, want ErrEntered", err)
	}
	// Close takes a out: b leaves alone.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Leave(ctx); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Leave after Close: %v, want ErrClosed", err)
	}
	if err := b.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys left", n)
	}
	for _, n := range []int{0, -3} {
		if _, err := etcdio.NewDoubleBarrier(cli, key, n); !errors.Is(err, etcdio.ErrInvalidArgument) {
			t.Errorf("count %d: %v, want ErrInvalidArgument", n, err)
		}
	}
	if _, err := etcdio.NewBarrier(cli, ""); !errors.Is(err, etcdio.ErrInvalidArgument) {
		t.Errorf("empty key: %v, want ErrInvalidArgument", err)
	}
}

// A party whose session is lost while it waits in Enter fails at once with
// ErrLost and is no longer counted: the barrier fills with others.
func TestDoubleBarrierLostWhileEntering(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	a := newDoubleBarrier(t, cli, key, 3)
	victim := newDoubleBarrier(t, cli, key, 3, etcdio.WithSession(sess))
	ctx := testCtx(t, 20*time.Second)
	aIn, vIn := make(chan error, 1), make(chan error, 1)
	go func() { aIn <- a.Enter(ctx) }()
	go func() { vIn <- victim.Enter(ctx) }()
	testkit.Eventually(t, 5*time.Second, "two parties' keys", func() bool { return countKeys(t, cli, key) == 2 })
	if _, err := cli.Revoke(context.Background(), sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, vIn, "the lost party's Enter"); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Enter of a party whose lease was revoked: %v, want ErrLost", err)
	}
	stillBlocked(t, aIn, "Enter with 1 of 3 parties left")
	c, d := newDoubleBarrier(t, cli, key, 3), newDoubleBarrier(t, newClient(t), key, 3)
	cIn := make(chan error, 1)
	go func() { cIn <- c.Enter(ctx) }()
	if err := d.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan error{aIn, cIn} {
		if err := within(t, ch, "Enter"); err != nil {
			t.Fatal(err)
		}
	}
	left := make(chan error, 3)
	for _, p := range []barrier.DoubleBarrier{a, c, d} {
		go func() { left <- p.Leave(ctx) }()
	}
	for range 3 {
		if err := within(t, left, "Leave"); err != nil {
			t.Fatal(err)
		}
	}
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// barrierWatches counts the goroutines in which a double barrier's wait is
// kept: session helpers (started by the loop through watchFor) running
// follow. A double barrier's session has no other follow.
func barrierWatches() int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		// watchFor's helper, as its own frame or inlined in await's.
		if strings.Contains(g, "etcdio.(*Session).follow(") && strings.Contains(g, "(*doubleBarrier).watchFor") {
			count++
		}
	}
	return count
}

// The waits of Enter and Leave run their watch on a helper of the party's
// session, kept by follow, and the helper ends with the wait: a cancelled
// Enter or Leave leaves no watch behind, and the party can try again.
func TestDoubleBarrierWaitsOnSessionHelper(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	a, b := newDoubleBarrier(t, cli, key, 2), newDoubleBarrier(t, newClient(t), key, 2)
	ctx := testCtx(t, 20*time.Second)
	watches := func(n int, what string) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, what, func() bool { return barrierWatches() == n })
	}

	actx, cancel := context.WithCancel(ctx)
	aIn := make(chan error, 1)
	go func() { aIn <- a.Enter(actx) }()
	watches(1, "a helper keeping the waiting Enter's watch")
	cancel()
	if err := within(t, aIn, "the cancelled Enter"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Enter: %v, want context.Canceled", err)
	}
	watches(0, "the cancelled Enter's helper to end")

	go func() { aIn <- a.Enter(ctx) }()
	watches(1, "a helper keeping the waiting Enter's watch")
	if err := b.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, aIn, "Enter"); err != nil {
		t.Fatal(err)
	}
	watches(0, "Enter's helper to end")

	// a's key was written first: its Leave waits for b's key to go.
	lctx, cancel := context.WithCancel(ctx)
	aOut, bOut := make(chan error, 1), make(chan error, 1)
	go func() { aOut <- a.Leave(lctx) }()
	watches(1, "a helper keeping the waiting Leave's watch")
	cancel()
	if err := within(t, aOut, "the cancelled Leave"); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Leave: %v, want context.Canceled", err)
	}
	watches(0, "the cancelled Leave's helper to end")

	// b deletes its key and waits for a's; a, still entered, leaves last.
	go func() { bOut <- b.Leave(ctx) }()
	watches(1, "a helper keeping b's Leave's watch")
	stillBlocked(t, bOut, "Leave while the lowest party stays")
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, bOut, "Leave"); err != nil {
		t.Fatal(err)
	}
	watches(0, "Leave's helper to end")
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys left after every party left", n)
	}
}

// Close of a party waiting in Enter on a shared session ends the wait with
// ErrClosed, deletes its key and ends the wait's helper; the session lives
// on.
func TestDoubleBarrierCloseWhileEntering(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	a := newDoubleBarrier(t, cli, key, 2, etcdio.WithSession(sess))
	in := make(chan error, 1)
	go func() { in <- a.Enter(testCtx(t, 20*time.Second)) }()
	testkit.Eventually(t, 5*time.Second, "a helper keeping the waiting Enter's watch", func() bool { return barrierWatches() == 1 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := within(t, in, "Enter of a closed party"); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Enter of a party closed while waiting: %v, want ErrClosed", err)
	}
	testkit.Eventually(t, 5*time.Second, "the closed party's helper to end", func() bool { return barrierWatches() == 0 })
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys left after Close", n)
	}
	if err := sess.Err(); err != nil {
		t.Fatalf("the shared session ended with the party: %v", err)
	}
}

// The lowest party (the first to enter) dies while another waits in Leave
// for it: that Leave returns, the barrier is left empty (key/ready too), and
// the next round works.
func TestDoubleBarrierLowestDiesWhileOthersLeave(t *testing.T) {
	testkit.NoLeaks(t)
	key := prefixOf(t)
	cli := newClient(t)
	sess := testkit.ClosedAtEnd[*etcdio.Session](t)(etcdio.NewSession(cli))
	low := newDoubleBarrier(t, cli, key, 2, etcdio.WithSession(sess))
	other := newDoubleBarrier(t, newClient(t), key, 2)
	ctx := testCtx(t, 20*time.Second)
	lowIn := make(chan error, 1)
	go func() { lowIn <- low.Enter(ctx) }()
	testkit.Eventually(t, 5*time.Second, "the lowest party's key", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	if err := other.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, lowIn, "the lowest party's Enter"); err != nil {
		t.Fatal(err)
	}
	out := make(chan error, 1)
	go func() { out <- other.Leave(ctx) }()
	// other deletes its key and waits for the lowest's.
	testkit.Eventually(t, 5*time.Second, "the other party's key to go", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	stillBlocked(t, out, "Leave while the lowest party stays")
	if _, err := cli.Revoke(context.Background(), sess.LeaseID()); err != nil {
		t.Fatal(err)
	}
	if err := within(t, out, "Leave after the lowest party died"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(context.Background(), key+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		t.Errorf("key %s left after every party left", kv.Key)
	}
	// A new round: a Enter must wait for a second party, not pass on a
	// stale ready.
	a, b := newDoubleBarrier(t, cli, key, 2), newDoubleBarrier(t, newClient(t), key, 2)
	aIn := make(chan error, 1)
	go func() { aIn <- a.Enter(ctx) }()
	stillBlocked(t, aIn, "Enter of a new round with 1 of 2 parties")
	if err := b.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, aIn, "Enter of the new round"); err != nil {
		t.Fatal(err)
	}
	left := make(chan error, 2)
	for _, p := range []barrier.DoubleBarrier{a, b} {
		go func() { left <- p.Leave(ctx) }()
	}
	for range 2 {
		if err := within(t, left, "Leave of the new round"); err != nil {
			t.Fatal(err)
		}
	}
	if n := countKeys(t, cli, key); n != 0 {
		t.Fatalf("%d keys left after the new round", n)
	}
}
