package zkio_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/zkio"
)

// parties returns the party znodes under a double barrier's path (ready
// left out).
func parties(t *testing.T, admin *zk.Conn, path string) []string {
	t.Helper()
	kids, _, err := admin.Children(path)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return slices.DeleteFunc(kids, func(k string) bool { return k == "ready" })
}

// TestDoubleBarrierLostJoinGivenUp: an Enter whose join transaction landed
// but whose reply was lost, and which cannot look its znode up, gives up
// when its ctx ends. If another party counted its znode and wrote ready
// meanwhile, the round is complete with it in: Enter returns nil, and both
// leave. If no one did, Enter returns ctx's error and its znode is gone once
// it returns. Before, the give-up deleted the znode in the background with
// no version guard and returned ctx's error, while the other party had
// passed the barrier counting it.
func TestDoubleBarrierLostJoinGivenUp(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const path = "/dblostjoin/counted"
	a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2))
	b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2))
	lost, heal := zkio.LoseJoinReply(a)
	defer heal()
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aerr := make(chan error, 1)
	go func() { aerr <- a.Enter(actx) }()
	testkit.Eventually(t, 10*time.Second, "a's join landed, its reply lost", lost)
	if err := b.Enter(ctx); err != nil {
		t.Fatalf("b's Enter, a's znode in: %v", err)
	}
	acancel()
	if err := <-aerr; err != nil {
		t.Fatalf("a's Enter gave up with %v, yet b passed the barrier counting it", err)
	}
	left := make(chan error, 2)
	for _, d := range []barrier.DoubleBarrier{a, b} {
		go func() { left <- d.Leave(ctx) }()
	}
	for range 2 {
		if err := <-left; err != nil {
			t.Fatal(err)
		}
	}

	const alone = "/dblostjoin/alone"
	c := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, alone, 2))
	lost, heal = zkio.LoseJoinReply(c)
	defer heal()
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	cerr := make(chan error, 1)
	go func() { cerr <- c.Enter(cctx) }()
	testkit.Eventually(t, 10*time.Second, "c's join landed, its reply lost", lost)
	ccancel()
	if err := <-cerr; !errors.Is(err, context.Canceled) {
		t.Fatalf("c's Enter, given up alone: %v, want context.Canceled", err)
	}
	if got := parties(t, admin, alone); len(got) != 0 {
		t.Fatalf("c's Enter returned, its znode left: %v", got)
	}
}

// TestDoubleBarrierLeaveAgainIgnoresNextRound: a second Leave, after one
// whose ctx ended once the party's znode was deleted, returns once its own
// round's parties have all left, though parties of the next round have
// entered (waiting for their count, or past it). Before, it waited for the
// lowest party there now: one of the next round.
func TestDoubleBarrierLeaveAgainIgnoresNextRound(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	for _, next := range []int{1, 2} { // parties of the next round, of 2
		path := "/dbleaveagain/" + string(rune('0'+next))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2))
		b := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2))
		entered := make(chan error, 1)
		go func() { entered <- a.Enter(ctx) }()
		if err := b.Enter(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-entered; err != nil {
			t.Fatal(err)
		}
		low, high := a, b
		if zkio.DBNode(b) < zkio.DBNode(a) {
			low, high = b, a
		}
		hnode := zkio.DBNode(high)
		hctx, hcancel := context.WithCancel(ctx)
		left := make(chan error, 1)
		go func() { left <- high.Leave(hctx) }()
		testkit.Eventually(t, 10*time.Second, "the higher party's znode deleted", func() bool {
			ok, _, err := admin.Exists(hnode)
			return err == nil && !ok
		})
		hcancel()
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("first Leave: %v, want context.Canceled", err)
		}
		if err := low.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		nextErr := make(chan error, next)
		for range next {
			d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2))
			go func() { nextErr <- d.Enter(ctx) }()
		}
		testkit.Eventually(t, 10*time.Second, "the next round's parties in", func() bool {
			return len(parties(t, admin, path)) == next
		})
		if next == 2 {
			for range next {
				if err := <-nextErr; err != nil {
					t.Fatalf("the next round's Enter: %v", err)
				}
			}
		}
		lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
		if err := high.Leave(lctx); err != nil {
			t.Fatalf("%d of the next round in: second Leave, every party of its round gone: %v", next, err)
		}
		lcancel()
		if err := high.Leave(ctx); !errors.Is(err, barrier.ErrNotEntered) {
			t.Fatalf("a third Leave: %v, want ErrNotEntered", err)
		}
	}
}

// TestDoubleBarrierCloseEndsWithdrawal: an Enter that gives up with its
// join's outcome unknown withdraws its znode, and waits for the connection
// to do so (withdrawWait at most, then a session helper goes on); Close
// cuts that wait short and takes the party out itself, leaving no znode. Before, Close waited for the withdrawal, which ignored
// it: for as long as the connection stayed down, or the session lived.
func TestDoubleBarrierCloseEndsWithdrawal(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const path = "/dbclosewithdraw"
	d, err := zkio.NewDoubleBarrier(servers, path, 2)
	if err != nil {
		t.Fatal(err)
	}
	lost, heal := zkio.LoseJoinAndListings(d)
	defer heal()
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	entered := make(chan error, 1)
	go func() { entered <- d.Enter(ectx) }()
	testkit.Eventually(t, 10*time.Second, "the join landed, its reply lost", lost)
	ecancel() // Enter gives up, and withdraws: its listings fail

	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close = %v", err)
		}
	case <-time.After(15 * time.Second):
		heal() // let the test end
		<-closed
		t.Fatal("Close waited for a withdrawal that could not list the barrier")
	}
	if err := <-entered; err == nil {
		t.Fatal("Enter, given up and closed, returned nil")
	}
	if got := parties(t, admin, path); len(got) != 0 {
		t.Fatalf("Close returned, the party's znode left: %v", got)
	}
}
