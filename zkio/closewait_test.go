package zkio_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// closeHeld closes c (a lock or a double barrier's party) and, once asked
// is closed (a request c's calls left under way is held: unanswered, or
// failing with the connection), checks that Close has not returned 2s
// later (longer than a caller's wait for its withdrawal, withdrawWait);
// then it calls release and returns Close's error once Close returns.
func closeHeld(t *testing.T, c io.Closer, asked <-chan struct{}, release func()) error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the request to hold was not asked for")
	}
	select {
	case err := <-closed:
		t.Errorf("Close returned while a request its calls left under way was held (unanswered, or failing with the connection): %v", err)
		release()
		return err
	case <-time.After(2 * time.Second): // a negative check: nothing to wait on
	}
	release()
	select {
	case err := <-closed:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return within 20s of ZooKeeper answering")
		return nil
	}
}

// nextOwnerFree checks that path holds want znodes, and, once free is
// called (if not nil), that a new lock's TryLock on it succeeds at once.
func nextOwnerFree(t *testing.T, servers []string, path string, want int, free func()) {
	t.Helper()
	admin := adminConn(t, servers)
	kids, _, err := admin.Children(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != want {
		t.Errorf("right after Close returned, %s holds %v, want %d znodes", path, kids, want)
	}
	if free != nil {
		free()
	}
	next := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := next.TryLock(ctx); err != nil {
		t.Errorf("TryLock of the next owner right after Close returned: %v", err)
	}
}

// TestCloseWaitsForCreateUnderWay: Close of a lock on a shared session,
// while its acquisition's create is not yet answered (held before it is
// sent, as behind others on a slow connection), returns only once that
// create is answered and its znode deleted: the next owner's TryLock right
// after finds the lock free. Before, Close returned as soon as the
// acquisition left the create running; the znode the create made stood
// after Close had returned, until a session helper deleted it.
func TestCloseWaitsForCreateUnderWay(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	const path = "/close-waits/create"
	if _, err := admin.Create("/close-waits", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := admin.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	closeWaitsForHeld(t, servers, path, "its create", zkio.HoldCreates)
}

// closeWaitsForHeld runs a Lock of a lock at path on a shared session whose
// requests hold holds (what names them), closes the lock once one is
// held, and checks (see closeHeld) that Close returns only once it is
// sent and answered; then that the next owner finds the lock free.
func closeWaitsForHeld(t *testing.T, servers []string, path, what string, hold func(*zkio.Session) (<-chan struct{}, func())) {
	t.Helper()
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	waiting, send := hold(s)
	release := sync.OnceFunc(send)
	t.Cleanup(release)
	l, err := zkio.NewLock(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	locked := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); locked <- err }()
	select {
	case <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatalf("Lock did not ask for %s", what)
	}
	asked := make(chan struct{})
	close(asked)
	if err := closeHeld(t, l, asked, release); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-locked; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("Lock of the closed lock: %v, want ErrClosed", err)
	}
	nextOwnerFree(t, servers, path, 0, nil)
}

// TestCloseWaitsForWithdrawalUnderWay: Close of a waiter on a shared
// session, while ZooKeeper does not answer the delete of its znode (the
// link holds it, longer than withdrawWait), returns only once the delete
// is answered: right after, the lock's directory holds the holder's znode
// alone, and once the holder releases, the next owner's TryLock succeeds.
// Before, Close returned withdrawWait after it sent the delete, which went
// on on a session helper.
func TestCloseWaitsForWithdrawalUnderWay(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const path = "/close-waits/withdrawal"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path))
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	p, via := newPartition(t, servers[0])
	// A timeout long enough that the held link costs the session nothing.
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession([]string{via}, zkio.WithSessionTimeout(30*time.Second)))
	w, err := zkio.NewLock(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	locked := make(chan error, 1)
	go func() { _, err := w.Lock(ctx); locked <- err }()
	queued(t, servers, path, 2)
	asked, release := holdRequests(t, p, asking(opDelete, path+"/_c_",
		len(path+"/_c_00000000-0000-0000-0000-000000000000-lock-0000000000")))
	if err := closeHeld(t, w, asked, release); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-locked; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("Lock of the closed waiter: %v, want ErrClosed", err)
	}
	nextOwnerFree(t, servers, path, 1, func() {
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCloseWaitsForStatUnderWay: Close of a lock on a shared session,
// while its acquisition's read of its own znode's creation zxid is not yet
// answered (held before it is sent), returns only once that read is done:
// no request of the lock's runs on after Close returned (nor, once the
// session closes, after that). Before, the read ran on a goroutine of its
// own that neither Close waited for.
func TestCloseWaitsForStatUnderWay(t *testing.T) {
	t.Parallel()
	closeWaitsForHeld(t, startZooKeeper(t), "/close-waits/stat", "its znode's creation zxid", zkio.HoldStats)
}

// TestDoubleBarrierCloseWaitsForEnterUnderWay: Close of a double barrier's
// party on a shared session, while ZooKeeper does not answer what an
// Enter under way left running (its join, which Close cut short; or the
// withdrawal of an Enter whose context ended, which returned withdrawWait
// after it sent it), returns only once that is answered and settled: right
// after, no znode of the party is under the path. Before, Close returned
// at once, and the join's znode appeared, or the withdrawn one stayed,
// until a session helper deleted it.
func TestDoubleBarrierCloseWaitsForEnterUnderWay(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	for _, c := range []struct {
		name string
		// withdrawal: the Enter's context ends once the party is in, and
		// its withdrawal is held; else its join is held, and Close cuts
		// the Enter short.
		withdrawal bool
		hold       func(path string) []byte
		want       error // the Enter's error
	}{
		{name: "join", hold: func(path string) []byte {
			return append(multiOp(opCreate), asking(0, path+"/", partyLen(path))...)
		}, want: primitives.ErrClosed},
		{name: "withdrawal", withdrawal: true, hold: func(path string) []byte {
			return append(multiOp(opDelete), asking(0, path+"/", partyLen(path))...)
		}, want: context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := "/close-waits/double-" + c.name
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, via := newPartition(t, servers[0])
			s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession([]string{via}, zkio.WithSessionTimeout(30*time.Second)))
			d, err := zkio.NewDoubleBarrier(nil, path, 2, zkio.WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			asked, release := holdRequests(t, p, c.hold(path))
			ectx, giveUp := context.WithCancel(ctx)
			defer giveUp()
			entered := make(chan error, 1)
			go func() { entered <- d.Enter(ectx) }()
			if c.withdrawal {
				testkit.Eventually(t, 10*time.Second, "the party in, waiting for ready", func() bool {
					return len(parties(t, admin, path)) == 1
				})
				giveUp()
			}
			select {
			case <-asked:
			case <-time.After(20 * time.Second):
				t.Fatal("Enter did not send the request")
			}
			if c.withdrawal {
				if err := <-entered; !errors.Is(err, c.want) {
					t.Fatalf("Enter whose context ended: %v, want %v", err, c.want)
				}
			}
			if err := closeHeld(t, d, asked, release); err != nil {
				t.Errorf("Close: %v", err)
			}
			if kids := parties(t, admin, path); len(kids) != 0 {
				t.Errorf("right after Close returned, %s holds the parties %v, want none", path, kids)
			}
			if !c.withdrawal {
				if err := <-entered; !errors.Is(err, c.want) {
					t.Errorf("Enter cut short by Close: %v, want %v", err, c.want)
				}
			}
		})
	}
}

// TestCloseWaitsForRetriedCleanup: Close of a lock on a shared session
// whose cleanup's first delete fails with the connection waits for the
// deletes tried after it, within its bound: right after Close returned,
// the lock's directory holds no znode of the closed lock, and the next
// owner's TryLock succeeds. The cleanup is a waiter's withdrawal, or the
// delete of the znode a create made that Close had cut short (answered
// after its caller left). Before, Close waited for the first delete alone;
// an uncounted session helper tried again, and the znode stood after
// Close had returned.
func TestCloseWaitsForRetriedCleanup(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	for _, c := range []struct {
		name string
		// held: the lock's creates wait until send is called; else the
		// lock waits behind a holder.
		held bool
	}{
		{name: "withdrawal"},
		{name: "abandoned create", held: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := "/close-waits/retried-" + strings.ReplaceAll(c.name, " ", "-")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
			var waiting <-chan struct{}
			send := func() {}
			if c.held {
				// The lock's directory, which the held create needs.
				admin := adminConn(t, servers)
				for _, p := range []string{"/close-waits", path} {
					if _, err := admin.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
						t.Fatal(err)
					}
				}
				waiting, send = zkio.HoldCreates(s)
				send = sync.OnceFunc(send)
				t.Cleanup(send)
			}
			failed, heal := zkio.FailDeletes(s)
			heal = sync.OnceFunc(heal)
			t.Cleanup(heal)
			var holder lock.Service
			if !c.held {
				holder = testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path))
				if _, err := holder.Lock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			l, err := zkio.NewLock(nil, path, zkio.WithSession(s))
			if err != nil {
				t.Fatal(err)
			}
			locked := make(chan error, 1)
			go func() { _, err := l.Lock(ctx); locked <- err }()
			if c.held {
				select {
				case <-waiting:
				case <-time.After(20 * time.Second):
					t.Fatal("Lock did not ask for its create")
				}
			} else {
				queued(t, servers, path, 2)
			}
			// Asked: the first delete failed, and the next is under way.
			asked := make(chan struct{})
			lockErr := make(chan error, 1)
			go func() {
				defer close(asked)
				if c.held {
					// Close cut the Lock short, its create left running:
					// answered now, its znode is deleted after.
					err := <-locked
					lockErr <- err
					send()
				}
				deadline := time.Now().Add(20 * time.Second)
				for failed() < 2 && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond) // polling a counter with a deadline
				}
			}()
			if err := closeHeld(t, l, asked, heal); err != nil {
				t.Errorf("Close: %v", err)
			}
			if failed() < 2 {
				t.Errorf("the cleanup's delete failed %d times, want it tried again", failed())
			}
			if !c.held {
				lockErr <- <-locked
			}
			if err := <-lockErr; !errors.Is(err, primitives.ErrClosed) {
				t.Errorf("Lock of the closed lock: %v, want ErrClosed", err)
			}
			want, free := 0, func() {}
			if holder != nil {
				want, free = 1, func() {
					if err := holder.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			nextOwnerFree(t, servers, path, want, free)
		})
	}
}
