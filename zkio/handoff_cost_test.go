package zkio_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/primitives"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// A handoff wakes the next holder alone: its watch of the znode ahead
// fires, and nothing else does. A short hold or wait sets no watch on its
// own znode (one is set only once a hold outlives driver.HoldWatchAfter or
// a wait a quarter of the TTL), so a release fires no watch of its own
// session. Ten owners queue, then each locks and unlocks at once in turn:
// nine handoffs, nine wakeups (the first holder, which held while the
// others queued, may add one).
func TestHandoffWakesOnlyTheNext(t *testing.T) {
	t.Parallel()
	const owners = 10
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const path = "/handoff/lock"
	locks := make([]lock.Service, owners)
	for i := range locks {
		s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(20*time.Second), zkio.WithMetrics(m)))
		locks[i] = testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
	}
	if _, err := locks[0].Lock(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, owners)
	for i := 1; i < owners; i++ {
		go func() {
			if _, err := locks[i].Lock(ctx); err != nil {
				done <- err
				return
			}
			done <- locks[i].Unlock(ctx)
		}()
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%d znodes queued", i+1), func() bool {
			kids, _, err := admin.Children(path)
			if err != nil {
				t.Fatal(err)
			}
			return len(kids) == i+1
		})
	}
	if err := locks[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range owners - 1 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// A stalled goroutine on a loaded machine may hold past
	// HoldWatchAfter and add a wakeup; most holds do not.
	woken := testkit.Gather(t, reg)[`disco_wakeups_total{kind="lock"}`]
	if woken < owners-1 || woken > owners-1+3 {
		t.Errorf("%d handoffs woke sessions %v times, want %d (a few more at most)", owners-1, woken, owners-1)
	}
}

// Handoffs leave no watch behind: a waiter whose listing named a znode
// ahead that is gone by the time it watches it sets no watch on it (an
// exists watch on a gone znode waits for its creation, for good: a
// sequential znode's name never comes back). Two owners on two sessions
// lock and unlock in turn; after 400 handoffs neither session's client
// holds a watch.
func TestHandoffsLeaveNoWatches(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var g errgroup.Group
	var sessions []*zkio.Session
	for range 2 {
		s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
		sessions = append(sessions, s)
		l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/watchless/lock", zkio.WithSession(s)))
		g.Go(func() error {
			for range 200 {
				if _, err := l.Lock(ctx); err != nil {
					return err
				}
				if err := l.Unlock(ctx); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// A watch set on a znode that was then deleted fires; its event may
	// still be on its way.
	testkit.Eventually(t, 10*time.Second, "no watch left on either session", func() bool {
		return zkio.Watchers(sessions[0])+zkio.Watchers(sessions[1]) == 0
	})
}

// A hold whose znode is deleted before its watch is set ends with Lost and
// leaves no watch behind (the watch is set only once a hold is
// driver.HoldWatchAfter old, and then finds the znode gone).
func TestHoldDeletedUnwatchedLeavesNoWatch(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/watchless/held", zkio.WithSession(s)))
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Delete(g.Key, -1); err != nil {
		t.Fatal(err)
	}
	for e := range events {
		if lost, ok := e.(primitives.Lost); ok && lost.Created == g.Created {
			break
		}
	}
	testkit.Eventually(t, 5*time.Second, "no watch left on the session", func() bool { return zkio.Watchers(s) == 0 })
}
