package zkio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

// TestSemaphoreBadInput: no permits, and a path whose data is not a disco
// semaphore's, are refused with ErrInvalidArgument.
func TestSemaphoreBadInput(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	if _, err := zkio.NewSemaphore(nil, "/sembad", 0, zkio.WithSession(s)); !errors.Is(err, zkio.ErrInvalidArgument) {
		t.Errorf("0 permits: %v, want ErrInvalidArgument", err)
	}
	if _, err := admin.Create("/semforeign", []byte("someone's"), 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := zkio.NewSemaphore(nil, "/semforeign", 2, zkio.WithSession(s)); !errors.Is(err, zkio.ErrInvalidArgument) {
		t.Errorf("a path with foreign data: %v, want ErrInvalidArgument", err)
	}
}

// TestSemaphoreLayout: a hold is one lease under path/leases, claiming its
// slot in its data; the internal mutex under path/locks is released once
// the lease is granted; a cancelled Acquire leaves neither.
func TestSemaphoreLayout(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const path = "/semlayout"
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	a := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, path, 1, zkio.WithSession(s)))
	w := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, path, 1, zkio.WithSession(s)))
	g, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.Key, path+"/leases/_c_") || !strings.Contains(g.Key, "-lease-") || g.Slot != 0 {
		t.Fatalf("grant %+v: want a lease %s/leases/_c_<uuid>-lease-<seq> in slot 0", g, path)
	}
	if data, _, err := admin.Get(g.Key); err != nil || string(data) != "disco-slot-0" {
		t.Fatalf("lease data %q, %v", data, err)
	}
	if data, _, err := admin.Get(path); err != nil || string(data) != "disco-permits=1" {
		t.Fatalf("path data %q, %v", data, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer wcancel()
	if _, err := w.Acquire(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with no permit free: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "only the holder's lease, and no mutex node", func() bool {
		return len(subtree(t, admin, path+"/locks")) == 1 && len(subtree(t, admin, path+"/leases")) == 2
	})
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := subtree(t, admin, path+"/leases"); len(got) != 1 {
		t.Fatalf("after the Release: %v", got)
	}
}

// TestSemaphoreGrantScope: a zkio semaphore is a primitives.GrantScoper, so
// FollowGrants stamps each grant with its slot's scope.
func TestSemaphoreGrantScope(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	a := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, "/semscope", 2, zkio.WithSession(s)))
	if _, ok := a.(primitives.GrantScoper); !ok {
		t.Fatalf("%T is not a primitives.GrantScoper", a)
	}
	gt := primitives.FollowGrants(ctx, "/semscope", a)
	g, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the grant's scope stamped", func() bool {
		scope, tok := gt.Scoped()
		return scope == g.Scope() && tok == g.Token()
	})
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreCountsOnlyLeases: only the semaphore's own leases
// (_c_<uuid>-lease-<seq>) take permits: a nested name's znode under
// path/leases, or a persistent znode made there by hand, takes none. Before,
// every child of path/leases counted, and the one permit was taken.
func TestSemaphoreCountsOnlyLeases(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []string{"nested", "stray"} {
		path := "/semforeignkids/" + c
		sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(servers, path, 1))
		other := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(servers, path, 1))
		if c == "nested" {
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path+"/leases/sub"))
			if _, err := l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			for _, p := range []string{path + "/leases", path + "/leases/stray"} {
				if _, err := admin.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
					t.Fatal(err)
				}
			}
		}
		g, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("%s: TryAcquire of the one free permit: %v (leases: %v)", c, err, subtree(t, admin, path+"/leases"))
		}
		if err := sem.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		g, err = sem.Acquire(actx)
		acancel()
		if err != nil {
			t.Fatalf("%s: Acquire of the one free permit: %v", c, err)
		}
		if _, err := other.TryAcquire(ctx); !errors.Is(err, semaphore.ErrNoPermit) {
			t.Fatalf("%s: TryAcquire with the permit held: %v, want ErrNoPermit", c, err)
		}
		if err := sem.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewSemaphoreHonoursWithContext: NewSemaphore, on a shared session
// whose read of path's data ZooKeeper does not answer, gives up when
// WithContext's context ends. Before, it read with a context of its own
// (10s from the background) and ignored WithContext's end; then it
// waited for the read's answer, or for the connection to fail, whatever
// its context.
func TestNewSemaphoreHonoursWithContext(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	p, via := newPartition(t, servers[0])
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession([]string{via}))
	const path = "/semwithcontext"
	asked := dropRequests(p, []byte(path))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		sem, err := zkio.NewSemaphore(nil, path, 2, zkio.WithSession(s), zkio.WithContext(ctx))
		if err == nil {
			sem.Close()
		}
		done <- err
	}()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("NewSemaphore did not read path's data")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("NewSemaphore, WithContext's context cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("NewSemaphore still waits 5s after WithContext's context was cancelled, its read unanswered")
	}
}

// TestSemaphoreTryAcquireDoesNotWaitForTheMutex: TryAcquire answers at
// once. While another owner holds the semaphore's internal mutex (it is
// acquiring: a Curator owner, or a disco owner stalled between taking the
// mutex and creating its lease), TryAcquire fails with ErrNoPermit and
// leaves nothing; it waited for the mutex until its ctx ended.
func TestSemaphoreTryAcquireDoesNotWaitForTheMutex(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	const path = "/semtry/mutex"
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, path, 1, zkio.WithSession(s)))
	if _, err := admin.Create(path+"/locks", nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := admin.Create(path+"/locks/_c_00000000-0000-0000-0000-000000000000-lock-", nil,
		zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire while another owner holds the mutex: %v, want ErrNoPermit at once", err)
	}
	for _, dir := range []string{path + "/locks", path + "/leases"} {
		kids, _, err := admin.Children(dir)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		if dir == path+"/locks" && len(kids) != 1 || dir == path+"/leases" && len(kids) != 0 {
			t.Fatalf("after the TryAcquire, %s holds %v", dir, kids)
		}
	}
}

// TestSemaphoreTryAcquireWithRoomSucceeds: TryAcquire takes a permit
// whenever fewer than N owners hold or are acquiring, also while another
// holds the internal mutex for its own acquisition: 2 owners of 2 permits,
// each holding at most one, are never refused.
func TestSemaphoreTryAcquireWithRoomSucceeds(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var g errgroup.Group
	var refused, took atomic.Int64
	for range 2 {
		s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
		sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, "/semtry/room", 2, zkio.WithSession(s)))
		g.Go(func() error {
			for range 100 {
				gr, err := sem.TryAcquire(ctx)
				if errors.Is(err, semaphore.ErrNoPermit) {
					refused.Add(1)
					continue
				}
				if err != nil {
					return err
				}
				took.Add(1)
				if err := sem.Release(ctx, gr); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d of %d TryAcquires refused with ErrNoPermit while at most 2 owners of 2 permits held or acquired", n, n+took.Load())
	}
}

// TestSemaphoreTryAcquireCountsAnOwnerOnce: an owner in the middle of its
// acquisition (it holds the internal mutex and has created its lease, one
// uuid in both names) is one owner: with 2 permits, a TryAcquire beside it
// waits its turn for the mutex and takes the other permit.
func TestSemaphoreTryAcquireCountsAnOwnerOnce(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	admin := adminConn(t, servers)
	const path = "/semtry/once"
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers))
	sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(nil, path, 2, zkio.WithSession(s)))
	for _, dir := range []string{path + "/locks", path + "/leases"} {
		if _, err := admin.Create(dir, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	const other = "_c_00000000-0000-0000-0000-000000000000-"
	mutex, err := admin.Create(path+"/locks/"+other+"lock-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Create(path+"/leases/"+other+"lease-", nil, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		g, err := sem.TryAcquire(ctx)
		if err == nil {
			err = sem.Release(ctx, g)
		}
		got <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the TryAcquire queued for the mutex", func() bool {
		kids, _, err := admin.Children(path + "/locks")
		return err == nil && len(kids) == 2
	})
	if err := admin.Delete(mutex, -1); err != nil { // the other owner is done with the mutex
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("TryAcquire beside one owner of 2 permits in the middle of its acquisition: %v", err)
	}
}

// TestSemaphoreTryAcquireBehindStalledOwner: TryAcquire answers promptly
// also behind an owner that holds the internal mutex and stalls there
// (its connection frozen before the create of its lease): with 2 permits
// and that one owner, it fails with ErrNoPermit within a few seconds, long
// before its ctx ends, and leaves nothing; once the stalled owner goes on,
// it acquires. Before, TryAcquire waited for the mutex until its ctx
// ended, or (here) the stalled owner's session expired.
func TestSemaphoreTryAcquireBehindStalledOwner(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const path = "/semtry/stalled"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, via := newPartition(t, servers[0])
	stalled := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore([]string{via}, path, 2))
	asked, release := holdRequests(t, p, asking(opCreate, path+"/leases/_c_",
		len(path+"/leases/_c_00000000-0000-0000-0000-000000000000-lease-")))
	acquired := make(chan error, 1)
	go func() { _, err := stalled.Acquire(ctx); acquired <- err }()
	select {
	case <-asked:
	case <-time.After(20 * time.Second):
		t.Fatal("the stalled owner did not ask for its lease")
	}
	sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(servers, path, 2))
	tctx, tcancel := context.WithTimeout(ctx, 15*time.Second)
	defer tcancel()
	began := time.Now()
	_, err := sem.TryAcquire(tctx)
	took := time.Since(began)
	if !errors.Is(err, semaphore.ErrNoPermit) || took > 5*time.Second {
		t.Fatalf("TryAcquire behind an owner stalled with the internal mutex: %v after %v, want ErrNoPermit within 5s", err, took)
	}
	t.Logf("TryAcquire behind the stalled owner: %v after %v", err, took)
	admin := adminConn(t, servers)
	for dir, want := range map[string]int{path + "/locks": 1, path + "/leases": 0} {
		kids, _, err := admin.Children(dir)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		if len(kids) != want {
			t.Errorf("after the TryAcquire, %s holds %v, want %d znodes", dir, kids, want)
		}
	}
	release()
	if err := <-acquired; err != nil {
		t.Fatalf("Acquire of the owner once it goes on: %v", err)
	}
	g, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire of the second permit once the other owner holds the first: %v", err)
	}
	if err := sem.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreWaiterGivesUpUnanswered: an Acquire whose listing of the
// leases ZooKeeper does not answer returns when its context ends, with
// the context's error; its lease and its mutex znode are deleted. Before,
// it waited for the listing's answer, or for the connection to fail.
func TestSemaphoreWaiterGivesUpUnanswered(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	p, via := newPartition(t, servers[0])
	const path = "/semunanswered"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	h := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(servers, path, 1))
	if _, err := h.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	w := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore([]string{via}, path, 1))
	// The listing of the leases, with a watch: the path as a string of
	// its own (its length first), then the watch flag.
	leases := path + "/leases"
	listing := binary.BigEndian.AppendUint32(nil, uint32(len(leases)))
	listing = append(append(listing, leases...), 1)
	asked := dropRequests(p, listing)
	wctx, giveUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := w.Acquire(wctx); done <- err }()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not list the leases")
	}
	giveUp()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire whose context ended: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire still waits 5s after its context ended, its listing unanswered")
	}
	queued(t, servers, path+"/leases", 1)
	queued(t, servers, path+"/locks", 0)
}

// dropRequests makes p lose what the client sends that contains match:
// the request goes nowhere, and the connection stays up. asked is closed
// at the first.
func dropRequests(p *partition, match []byte) (asked <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	p.px.ModifyTx(func(b []byte) []byte {
		if bytes.Contains(b, match) {
			once.Do(func() { close(ch) })
			return nil
		}
		return b
	})
	return ch
}
