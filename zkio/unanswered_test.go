package zkio_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

// asking returns what a request on path carries: op's code, if not 0, then
// the path as a string of length n (its length first). n is len(path)
// unless given: a path given by its prefix.
func asking(op int32, path string, n ...int) []byte {
	var b []byte
	if op != 0 {
		b = binary.BigEndian.AppendUint32(b, uint32(op))
	}
	l := len(path)
	if len(n) > 0 {
		l = n[0]
	}
	return append(binary.BigEndian.AppendUint32(b, uint32(l)), path...)
}

// ZooKeeper's codes of the requests the cases below drop.
const (
	opGetData = 4
	opDelete  = 2
	opSetData = 5
)

// TestGivesUpUnanswered: an acquisition whose context ends while
// ZooKeeper does not answer one of its requests returns at once, with the
// context's error, and leaves nothing behind: the first Lock on a new path
// (the create of the path), a Lock (the read of its znode's creation zxid,
// asked with its first listing; the watch it sets on its own znode once it
// has waited a while), a TryAcquire (its listings of the leases and
// of the mutex's queue, its read of the other leases' slots, the write of
// its own), an RLock and a Lock of a read/write lock (their request of the
// epoch), a barrier's Hold (its create, and its parent's), Release and
// Wait, a double barrier's Enter (its first listing, or create, of the
// path). Before, each of these requests ran on the caller's goroutine
// until ZooKeeper answered, or the connection failed.
func TestGivesUpUnanswered(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	mkdirs := func(t *testing.T, paths ...string) {
		t.Helper()
		for _, p := range paths {
			if _, err := admin.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				t.Fatal(err)
			}
		}
	}
	// A lease of another owner, of no slot yet.
	other := func(t *testing.T, path string) {
		t.Helper()
		if _, err := admin.Create(path+"/leases/_c_00000000-0000-0000-0000-000000000000-lease-", nil,
			zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatal(err)
		}
	}
	semaphoreOn := func(t *testing.T, via, path string, n int) func(context.Context) error {
		sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore([]string{via}, path, n))
		return func(ctx context.Context) error { _, err := sem.TryAcquire(ctx); return err }
	}
	rwlockOn := func(t *testing.T, via, path string, mode rwlock.Mode) func(context.Context) error {
		l := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock([]string{via}, path))
		if mode == rwlock.Read {
			return func(ctx context.Context) error { _, err := l.RLock(ctx); return err }
		}
		return func(ctx context.Context) error { _, err := l.Lock(ctx); return err }
	}
	// A barrier at path/b, held if held.
	barrierOn := func(t *testing.T, via, path string, held bool) barrier.Barrier {
		t.Helper()
		if held {
			mkdirs(t, path, path+"/b")
		}
		b, err := zkio.NewBarrier([]string{via}, path+"/b")
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The length of a lease's path under path.
	leaseLen := func(path string) int {
		return len(path + "/leases/_c_00000000-0000-0000-0000-000000000000-lease-0000000000")
	}
	for _, c := range []struct {
		name string
		// start makes the primitive, through via, and returns its call
		// and what the request ZooKeeper does not answer carries.
		start func(t *testing.T, via, path string) (call func(context.Context) error, drop []byte)
		// left is how many children each directory under path has
		// afterwards.
		left map[string]int
	}{
		{"first Lock", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path))
			return func(ctx context.Context) error { _, err := l.Lock(ctx); return err }, asking(0, path)
		}, map[string]int{"": 0}},
		{"Lock, its znode's stat", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path))
			return func(ctx context.Context) error { _, err := l.Lock(ctx); return err },
				asking(opExists, path+"/_c_", len(path+"/_c_00000000-0000-0000-0000-000000000000-lock-0000000000"))
		}, map[string]int{"": 0}},
		{"Lock, its own watch", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path))
			// A holder ahead of it, of admin's, named apart from it.
			mkdirs(t, path)
			if _, err := admin.Create(path+"/lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) error { _, err := l.Lock(ctx); return err },
				asking(opGetData, path+"/_c_", len(path+"/_c_00000000-0000-0000-0000-000000000000-lock-0000000000"))
		}, map[string]int{"": 1}},
		{"TryAcquire, leases", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			call := semaphoreOn(t, via, path, 1)
			return call, append(asking(0, path+"/leases"), 0)
		}, map[string]int{"/leases": 0, "/locks": 0}},
		{"TryAcquire, mutex queue", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			call := semaphoreOn(t, via, path, 1)
			mkdirs(t, path+"/leases", path+"/locks")
			return call, append(asking(0, path+"/locks"), 0)
		}, map[string]int{"/leases": 0, "/locks": 0}},
		{"TryAcquire, slot read", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			call := semaphoreOn(t, via, path, 2)
			mkdirs(t, path+"/leases", path+"/locks")
			other(t, path)
			return call, asking(opGetData, path+"/leases/_c_00000000", leaseLen(path))
		}, map[string]int{"/leases": 1, "/locks": 0}},
		{"TryAcquire, slot write", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			call := semaphoreOn(t, via, path, 1)
			mkdirs(t, path+"/leases", path+"/locks")
			return call, asking(opSetData, path+"/leases/_c_", leaseLen(path))
		}, map[string]int{"/leases": 0, "/locks": 0}},
		{"RLock, epoch", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			return rwlockOn(t, via, path, rwlock.Read), asking(0, path+zkio.EpochSuffix)
		}, map[string]int{"": 0}},
		{"Lock, epoch", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			return rwlockOn(t, via, path, rwlock.Write), asking(0, path+zkio.EpochSuffix)
		}, map[string]int{"": 0}},
		{"Barrier.Hold", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			mkdirs(t, path)
			return barrierOn(t, via, path, false).Hold, asking(0, path+"/b")
		}, map[string]int{"": 0}},
		{"Barrier.Hold, parent", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			return barrierOn(t, via, path, false).Hold, asking(0, path)
		}, map[string]int{"": 0}},
		{"Barrier.Release", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			return barrierOn(t, via, path, true).Release, asking(opDelete, path+"/b")
		}, map[string]int{"": 1}},
		{"Barrier.Wait", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			return barrierOn(t, via, path, true).Wait, asking(0, path+"/b")
		}, map[string]int{"": 1}},
		{"DoubleBarrier.Enter", func(t *testing.T, via, path string) (func(context.Context) error, []byte) {
			d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier([]string{via}, path, 2))
			return d.Enter, asking(0, path)
		}, map[string]int{"": 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, via := newPartition(t, servers[0])
			path := "/unanswered/" + c.name
			mkdirs(t, "/unanswered")
			call, drop := c.start(t, via, path)
			asked := dropRequests(p, drop)
			ctx, giveUp := context.WithCancel(context.Background())
			defer giveUp()
			done := make(chan error, 1)
			go func() { done <- call(ctx) }()
			select {
			case <-asked:
			case <-time.After(20 * time.Second):
				t.Fatal("the call did not send the request")
			}
			giveUp()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("call whose context ended: %v, want context.Canceled", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the call still waits 3s after its context ended, ZooKeeper not answering")
			}
			p.px.UnmodifyTx()
			for dir, n := range c.left {
				testkit.Eventually(t, 20*time.Second, "what the call left in "+path+dir, func() bool {
					kids, _, err := admin.Children(path + dir)
					return err == nil && len(kids) == n || errors.Is(err, zk.ErrNoNode) && n == 0
				})
			}
		})
	}
}
