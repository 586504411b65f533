package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestWaiterGivesUpInOutage: a Lock whose context ends while ZooKeeper
// does not answer, its znode created but the answer lost, or waiting in
// the queue,
// returns at once with the context's error, rather than when the
// connection times out; its znode, if made, is deleted once the session
// reaches ZooKeeper again. Before, Lock sent its requests (the create,
// the listing, the watch of the znode ahead, the delete of its own) on
// the caller's goroutine and returned only once they failed, two thirds
// of the session timeout after the last answer.
func TestWaiterGivesUpInOutage(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	for _, step := range []string{"create", "wait"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			p, via := newPartition(t, servers[0])
			path := "/outage/gaveup/" + step
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path))
			w := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path, zkio.WithSessionTimeout(10*time.Second)))
			if _, err := h.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if step == "create" {
				p.px.BlackholeRx() // the create lands, its answer does not come
			}
			wctx, giveUp := context.WithCancel(ctx)
			waiting := make(chan error, 1)
			go func() { _, err := w.Lock(wctx); waiting <- err }()
			queued(t, servers, path, 2)
			p.cut()
			giveUp()
			select {
			case err := <-waiting:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Lock whose context ended: %v, want context.Canceled", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("Lock did not return within 2s of its context's end, ZooKeeper not answering")
			}
			p.heal()
			queued(t, servers, path, 1)
			if w.Err() != nil {
				t.Fatalf("the waiter's session ended: %v", w.Err())
			}
		})
	}
}

// TestCreateGivenUpOnLandsLater: a Lock that gives up while its create has
// not been sent yet leaves no znode once the create lands.
func TestCreateGivenUpOnLandsLater(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	waiting, send := zkio.HoldCreates(s)
	const path = "/create-given-up"
	admin := adminConn(t, servers)
	if _, err := admin.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	_, before, err := admin.Exists(path)
	if err != nil {
		t.Fatal(err)
	}
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
	ctx, giveUp := context.WithCancel(context.Background())
	locked := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); locked <- err }()
	<-waiting
	giveUp()
	if err := <-locked; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock given up on: %v, want context.Canceled", err)
	}
	send()
	testkit.Eventually(t, 10*time.Second, "the create's znode made, then deleted", func() bool {
		kids, st, err := admin.Children(path)
		return err == nil && len(kids) == 0 && st.Cversion >= before.Cversion+2
	})
}
