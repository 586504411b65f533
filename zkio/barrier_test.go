package zkio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestBarrierBadInput: bad arguments are refused with ErrInvalidArgument.
func TestBarrierBadInput(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	for name, err := range map[string]error{
		"no servers":             second(zkio.NewBarrier(nil, "/b")),
		"bad path":               second(zkio.NewBarrier(servers, "b")),
		"servers and session":    second(zkio.NewBarrier(servers, "/b", zkio.WithSession(s))),
		"cancel on suspend":      second(zkio.NewBarrier(servers, "/b", zkio.WithCancelOnSuspend())),
		"double: count 0":        second(zkio.NewDoubleBarrier(nil, "/d", 0, zkio.WithSession(s))),
		"double: no servers":     second(zkio.NewDoubleBarrier(nil, "/d", 2)),
		"double: reserved path":  second(zkio.NewDoubleBarrier(servers, "/zookeeper/d", 2)),
		"double: session option": second(zkio.NewDoubleBarrier(nil, "/d", 2, zkio.WithSession(s), zkio.WithTTL(time.Second))),
	} {
		if !errors.Is(err, zkio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestDoubleBarrierExactCount: of more parties than the count entering at
// once, exactly count enter and the others get ErrFull (the version-checked
// transactions of Enter).
func TestDoubleBarrierExactCount(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const count, n = 3, 8
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	type result struct {
		d   barrier.DoubleBarrier
		err error
	}
	results := make(chan result, n)
	for range n {
		d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(nil, "/dbexact", count, zkio.WithSession(s)))
		go func() { results <- result{d, d.Enter(ctx)} }()
	}
	var in []barrier.DoubleBarrier
	full := 0
	for range n {
		switch r := <-results; {
		case r.err == nil:
			in = append(in, r.d)
		case errors.Is(r.err, barrier.ErrFull):
			full++
		default:
			t.Fatal(r.err)
		}
	}
	if len(in) != count || full != n-count {
		t.Fatalf("%d entered and %d refused, want %d and %d", len(in), full, count, n-count)
	}
	left := make(chan error, count)
	for _, d := range in {
		go func() { left <- d.Leave(ctx) }()
	}
	for range count {
		if err := <-left; err != nil {
			t.Fatal(err)
		}
	}
}

// TestBarrierWaitWatchesBounded: on a shared session, Waits on a held
// barrier whose contexts end leave at most one watch, which the next Wait
// reuses; and the Wait still returns at the Release.
func TestBarrierWaitWatchesBounded(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	x, err := zkio.NewBarrier(nil, "/bwatch", zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	before := zkio.Watchers(s)
	for range 50 {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Millisecond)
		if err := x.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a held barrier: %v", err)
		}
		wcancel()
	}
	if after := zkio.Watchers(s); after > before+1 {
		t.Fatalf("%d watches after 50 ended Waits, %d before", after, before)
	}
	done := make(chan error, 1)
	go func() { done <- x.Wait(ctx) }()
	other, err := zkio.NewBarrier(servers, "/bwatch")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "no watches left", func() bool { return zkio.Watchers(s) <= before })
}

// TestDoubleBarrierCloseWithdraws: Close of an entered party deletes its
// znode at once, and the others leave without it; Close of a waiting
// party withdraws it.
func TestDoubleBarrierCloseWithdraws(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const path = "/dbclose"
	waiting, err := zkio.NewDoubleBarrier(servers, path, 3)
	if err != nil {
		t.Fatal(err)
	}
	entering := make(chan error, 1)
	go func() { entering <- waiting.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the waiting party's znode", func() bool { return len(subtree(t, admin, path)) == 2 })
	if err := waiting.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-entering; !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Enter cut short by Close: %v, want ErrClosed", err)
	}
	if err := waiting.Close(); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if got := subtree(t, admin, path); len(got) != 1 {
		t.Fatalf("after Close of a waiting party: %v, want only %s", got, path)
	}
	var ps []barrier.DoubleBarrier
	for range 2 {
		ps = append(ps, testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2)))
	}
	chs := make([]chan error, 2)
	for i, p := range ps {
		chs[i] = make(chan error, 1)
		go func() { chs[i] <- p.Enter(ctx) }()
	}
	for _, ch := range chs {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if err := ps[0].Close(); err != nil {
		t.Fatal(err)
	}
	if err := ps[1].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if got := subtree(t, admin, path); len(got) != 0 {
		t.Fatalf("after the last Leave: %v", got)
	}
	if err := ps[0].Err(); !errors.Is(err, primitives.ErrClosed) {
		t.Fatalf("Err after Close: %v", err)
	}
}

// TestDoubleBarrierStaleReady: a ready left by a round whose parties all
// died (no party znode beside it) does not refuse the next round.
func TestDoubleBarrierStaleReady(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const path = "/dbstale"
	for _, p := range []string{path, path + "/ready"} {
		if _, err := admin.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	var ps []barrier.DoubleBarrier
	for range 2 {
		ps = append(ps, testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(nil, path, 2, zkio.WithSession(s))))
	}
	for _, step := range []func(barrier.DoubleBarrier) error{
		func(d barrier.DoubleBarrier) error { return d.Enter(ctx) },
		func(d barrier.DoubleBarrier) error { return d.Leave(ctx) },
	} {
		errs := make(chan error, len(ps))
		for _, d := range ps {
			go func() { errs <- step(d) }()
		}
		for range ps {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	if left := subtree(t, admin, path); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestBarrierReleaseThenHoldFreesWaiters: Release lets every Wait under
// way return, also when the barrier is held again right after it (a
// coordinator's next phase): a waiter woken by the deletion does not look
// again and wait for the next Release. The test releases and holds in one
// transaction, so that every waiter's look after its wakeup finds the
// barrier held.
func TestBarrierReleaseThenHoldFreesWaiters(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const path, waiters = "/brelease-hold", 4
	holder, err := zkio.NewBarrier(servers, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, waiters)
	for range waiters {
		s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
		w, err := zkio.NewBarrier(nil, path, zkio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- w.Wait(ctx) }()
		testkit.Eventually(t, 10*time.Second, "the waiter watches the barrier", func() bool { return zkio.Watchers(s) > 0 })
	}
	data, _, err := admin.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Multi(&zk.DeleteRequest{Path: path, Version: -1},
		&zk.CreateRequest{Path: path, Data: data, Acl: zk.WorldACL(zk.PermAll)}); err != nil {
		t.Fatal(err)
	}
	defer holder.Release(context.Background())
	for i := range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d Waits still wait 10 s after the Release they waited for (the barrier was held again right after it)", waiters-i, waiters)
		}
	}
}

// TestBarrierWaitIgnoresAnEarlierRelease: a Wait returns at a Release made
// while it waits, not at one made before it began: an earlier Wait whose
// ctx ended left its watch for the next to reuse, and that watch's event of
// a Release (and Hold again) done before the next Wait began may reach it
// only after that Wait has found the barrier held. The proxy holds the
// server's answers until the Wait has asked.
func TestBarrierWaitIgnoresAnEarlierRelease(t *testing.T) {
	t.Parallel()
	ctx, admin, px, _, w := waiterWithEarlierWatch(t, "/bwait-earlier")
	const path = "/bwait-earlier"
	// Released and held again, the event held back on its way.
	px.PauseRx()
	data, _, err := admin.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Multi(&zk.DeleteRequest{Path: path, Version: -1},
		&zk.CreateRequest{Path: path, Data: data, Acl: zk.WorldACL(zk.PermAll)}); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 1)
	px.ModifyTx(func(b []byte) []byte {
		if bytes.Contains(b, []byte(path)) {
			select {
			case asked <- struct{}{}:
			default:
			}
		}
		return b
	})
	second, stop2 := context.WithTimeout(ctx, 2*time.Second)
	defer stop2()
	waited := make(chan error, 1)
	go func() { waited <- w.Wait(second) }()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the second Wait never looked at the barrier")
	}
	px.UnpauseRx()
	if err := <-waited; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Wait begun after the Release and the Hold, the barrier held throughout it: %v, want its ctx's deadline", err)
	}
}

// TestBarrierWaitOnAnEarlierWatchSeesARelease: a Wait that reuses the watch
// an earlier Wait (ended by its ctx) left returns at a Release made once it
// has looked, the barrier held again right after, as a Wait that set its
// own watch does. The proxy tells when the Wait's look was answered.
func TestBarrierWaitOnAnEarlierWatchSeesARelease(t *testing.T) {
	t.Parallel()
	ctx, admin, px, _, w := waiterWithEarlierWatch(t, "/bwait-spare")
	const path = "/bwait-spare"
	var asked atomic.Bool
	answered := make(chan struct{}, 1)
	px.ModifyTx(func(b []byte) []byte {
		if bytes.Contains(b, []byte(path)) {
			asked.Store(true)
		}
		return b
	})
	px.ModifyRx(func(b []byte) []byte {
		// A reply's header: length, then xid, which pings (-2) and watch
		// events (-1) have below zero: only a request's answer counts.
		if asked.Load() && len(b) >= 8 && int32(binary.BigEndian.Uint32(b[4:8])) >= 0 {
			select {
			case answered <- struct{}{}:
			default:
			}
		}
		return b
	})
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx) }() // takes the earlier Wait's watch
	select {
	case <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the second Wait's look was never answered")
	}
	data, _, err := admin.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Multi(&zk.DeleteRequest{Path: path, Version: -1},
		&zk.CreateRequest{Path: path, Data: data, Acl: zk.WorldACL(zk.PermAll)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Wait on an earlier Wait's watch still waits 10 s after a Release made while it waited (held again right after)")
	}
}

// waiterWithEarlierWatch holds the barrier at path and returns a waiter on
// a session of its own through px (and that session), whose first Wait
// ended with its ctx once its watch was set (kept for the next Wait), an
// admin connection and a ctx that ends with the test.
func waiterWithEarlierWatch(t *testing.T, path string) (context.Context, *zk.Conn, *faultproxy.Proxy, *zkio.Session, barrier.Barrier) {
	t.Helper()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	holder, err := zkio.NewBarrier(servers, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Release(context.Background()) })
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession([]string{px.Addr()}))
	w, err := zkio.NewBarrier(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	first, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { ended <- w.Wait(first) }()
	testkit.Eventually(t, 10*time.Second, "the first Wait's watch", func() bool { return zkio.Watchers(s) > 0 })
	stop()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first Wait: %v", err)
	}
	return ctx, admin, px, s, w
}

// TestBarrierWaitSeesAReleaseBetweenItsRequests: a Wait whose look finds
// the watch an earlier Wait left fired (here by a Release and Hold made
// before the look was answered) sets a watch of its own in a second
// request; a Release made between the two, the barrier held again before
// the second, ends the Wait: its second request finds another znode than
// its first did.
func TestBarrierWaitSeesAReleaseBetweenItsRequests(t *testing.T) {
	t.Parallel()
	const path = "/bwait-between"
	ctx, admin, _, s, w := waiterWithEarlierWatch(t, path)
	releaseAndHold := func() {
		data, _, err := admin.Get(path)
		if err == nil {
			_, err = admin.Multi(&zk.DeleteRequest{Path: path, Version: -1},
				&zk.CreateRequest{Path: path, Data: data, Acl: zk.WorldACL(zk.PermAll)})
		}
		if err != nil {
			t.Errorf("release and hold: %v", err)
		}
	}
	var looks atomic.Int32
	zkio.AroundExists(s, path,
		func() {
			if looks.Load() == 0 {
				releaseAndHold() // the earlier watch fires before the look is answered
			}
		},
		func() {
			if looks.Add(1) == 1 {
				releaseAndHold() // after the look, before the Wait's own watch
			}
		})
	wctx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := w.Wait(wctx); err != nil {
		t.Fatalf("a Wait whose barrier was released (and held again) between its look and its watch: %v, want nil", err)
	}
	if n := looks.Load(); n != 1 {
		t.Fatalf("%d looks on the earlier watch, want 1", n)
	}
}

// TestBarrierWaitSeesAReleaseWhileDisconnected: a Wait whose connection
// was down across a Release and the next Hold returns once the client is
// back: the watch the client sets again on reconnecting reports the new
// znode as a change of data, not the deletion, and the Wait's next look
// finds another znode than its first did. The session's connection goes
// through one of two proxies: the test closes that one with every link
// (the deletion's event is lost with it) and holds the other's bytes
// until the barrier was released and held again.
func TestBarrierWaitSeesAReleaseWhileDisconnected(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const path = "/bwait-disconnected"
	var pxs []*faultproxy.Proxy
	var addrs []string
	for range 2 {
		px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.Close() })
		pxs, addrs = append(pxs, px), append(addrs, px.Addr())
	}
	holder, err := zkio.NewBarrier(servers, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Release(context.Background()) })
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(addrs))
	w, err := zkio.NewBarrier(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait(ctx) }()
	testkit.Eventually(t, 10*time.Second, "the Wait's watch", func() bool { return zkio.Watchers(s) > 0 })
	on, other := pxs[0], pxs[1]
	if zkio.ServerOf(s) == addrs[1] {
		on, other = other, on
	}
	other.PauseTx()
	if err := on.Close(); err != nil {
		t.Fatal(err)
	}
	data, _, err := admin.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Multi(&zk.DeleteRequest{Path: path, Version: -1},
		&zk.CreateRequest{Path: path, Data: data, Acl: zk.WorldACL(zk.PermAll)}); err != nil {
		t.Fatal(err)
	}
	other.UnpauseTx()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Wait whose connection was down across a Release and the next Hold still waits 10 s after the client reconnected")
	}
}

// TestBarrierReleaseWithZnodesUnder: a barrier whose znode has others under
// it (another name's, here a lock's on <path>/sub) cannot be lowered, as
// ZooKeeper deletes no znode with children. Release says so with an error
// a caller can tell by a disco sentinel: the barrier's name collides with
// other names, so ErrInvalidArgument (and primitives'), not a bare
// zk.ErrNotEmpty; the barrier stays held. Once the znodes under it are
// gone, Release lowers it.
func TestBarrierReleaseWithZnodesUnder(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	const path = "/barrier-under/b"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := zkio.NewBarrier(servers, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path+"/sub"))
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	err = b.Release(ctx)
	if !errors.Is(err, zkio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), path) {
		t.Fatalf("Release of a barrier with a lock's znodes under it: %v, want an error naming %s wrapping ErrInvalidArgument", err, path)
	}
	if ok, _, err := admin.Exists(path); err != nil || !ok {
		t.Fatalf("after the refused Release the barrier's znode exists %v (%v), want held", ok, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The lock's parent stays (persistent, as its creator made it).
	if err := admin.Delete(path+"/sub", -1); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("Release once nothing is under the barrier: %v", err)
	}
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
