package safety

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// These tests pin defects found in review: a key left under a live lease by
// one failed delete, and a waiter whose watch stream went dark.

// countUnder counts the keys under prefix, read through a member no test
// fault touches.
func countUnder(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// throughMember0 returns the shared cluster (restored when t ends), a
// prefix of t's own, and a client that reaches member 0 only.
func throughMember0(t *testing.T) (*embedded.Cluster, string, *clientv3.Client) {
	t.Helper()
	c := cluster(t)
	t.Cleanup(func() { restoreCluster(t, c) })
	return c, "/safety/hardening/" + t.Name(), newClientOf(t, c.Member(0).NewClient)
}

// keysGone fails t unless the keys under prefix+"/" are all gone within
// 30 s, read through a member no test fault touches.
func keysGone(t *testing.T, prefix string) {
	t.Helper()
	if !eventually(30*time.Second, func() bool { return countUnder(t, observer(1), prefix+"/") == 0 }) {
		t.Fatalf("keys left under %s", prefix)
	}
}

// newKeepaliveClient is a client of the cluster configured as etcdio's doc
// advises for production: gRPC keepalives drop a connection whose peer went
// silent, which a blackhole can leave hung even after it ends (bytes it
// dropped mid-frame).
func newKeepaliveClient(t *testing.T, c *embedded.Cluster) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            c.Endpoints(),
		DialTimeout:          embedded.ClientDialTimeout,
		DialKeepAliveTime:    5 * time.Second, // etcd's --grpc-keepalive-min-time
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func newClientOf(t *testing.T, newClient func() (*clientv3.Client, error)) *clientv3.Client {
	t.Helper()
	cli, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Close of a lock on a shared session while etcd is unreachable: the delete
// that fails is retried while the session lives, so the key does not stay
// under the live lease and block everyone else.
func TestCloseKeyDeletedAfterFailedDelete(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	cli := newKeepaliveClient(t, c)
	prefix := "/safety/hardening/" + t.Name()
	s, err := etcdio.NewSession(cli, etcdio.WithTTL(20*time.Second), etcdio.WithLogger(zaptest.NewLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, mb := range c.Members() {
		mb.Blackhole()
	}
	if err := l.Close(); err == nil {
		t.Log("Close's delete went through before the blackhole") // the check below still holds
	}
	for _, mb := range c.Members() {
		mb.Unblackhole()
	}
	if !eventually(15*time.Second, func() bool { return countUnder(t, observer(0), prefix+"/") == 0 }) {
		t.Fatalf("the closed lock's key is still under the live lease 15s after etcd came back (session err: %v)", s.Err())
	}
	if s.Err() != nil {
		t.Fatalf("session ended (%v): the check proves nothing", s.Err())
	}
}

// A Lock whose transaction committed but whose reply was lost, and whose
// cleanup delete then failed too: the key must still go while the session
// lives, and the service's next Lock must not queue behind its own orphan.
func TestLockOrphanAfterLostReply(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	mb := c.Member(0)
	cli := newClientOf(t, mb.NewClient) // reaches member 0 only
	prefix := "/safety/hardening/" + t.Name()
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	px := mb.Proxy()
	px.BlackholeRx() // requests arrive; replies are lost
	lockErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := l.Lock(ctx)
		lockErr <- err
	}()
	if !eventually(5*time.Second, func() bool { return countUnder(t, observer(1), prefix+"/") == 1 }) {
		t.Fatal("the Lock's key was never written")
	}
	mb.Blackhole() // and now the cleanup cannot reach etcd either
	if err := <-lockErr; err == nil {
		t.Fatal("Lock succeeded without its reply")
	}
	px.UnblackholeRx()
	mb.Unblackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// Bytes lost in the blackhole broke the client's connection: wait until
	// it has a new one, as a caller would retry.
	if !eventually(10*time.Second, func() bool {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		defer rcancel()
		_, err := cli.Get(rctx, "health")
		return err == nil
	}) {
		t.Fatal("the client did not reconnect")
	}
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after an orphaned attempt: %v (queued behind its own orphan?)", err)
	}
	if n := countUnder(t, observer(1), prefix+"/"); n != 1 {
		t.Fatalf("%d keys under the prefix while holding, want 1 (the orphan stayed)", n)
	}
	if err := l.Release(ctx, g); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A waiter whose watch runs through a member that goes dark still sees the
// handoff: its watch notices the silence and moves to a new stream. The
// client's round-robin balancer, not disco, picks the member of each new
// stream and may pick the dark one again (its TCP connection is still up);
// each such pick costs one quiet spell (2 s), and so does each read the
// balancer sends there (one per-attempt timeout, 2 s), so the bound leaves
// room for many: a quiet machine sees the handoff in about 5 s, CI's loaded
// one once took more than 30 s. The waiter's TTL is long enough that its keepalive, which the
// balancer may also place on the dark member, outlives a few such picks: the
// test is about the watch. (A client configured with gRPC keepalives,
// DialKeepAliveTime, drops the dark connection from the balancer itself.)
func TestWaiterSeesHandoffWhenItsMemberGoesDark(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	prefix := "/safety/hardening/" + t.Name()
	const handoffBound = 60 * time.Second
	// The watch runs through one member; which, the test cannot see, so it
	// darkens each in turn.
	for k, dark := range c.Members() {
		// A fresh client per round: a blackhole drops bytes mid-stream and
		// can leave a connection that fails its next request.
		waiterCli := newClientOf(t, c.NewClient) // all three members
		waiter, err := etcdio.NewLock(waiterCli, prefix, etcdio.WithTTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		holderMember := c.Member((k + 1) % 3)
		holderCli := newClientOf(t, holderMember.NewClient)
		holder, err := etcdio.NewLock(holderCli, prefix, etcdio.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*handoffBound)
		hg, err := holder.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan lockResult, 1)
		go func() {
			g, err := waiter.Lock(ctx)
			got <- lockResult{g, err}
		}()
		if !eventually(5*time.Second, func() bool { return countUnder(t, observer((k+2)%3), prefix+"/") == 2 }) {
			select {
			case r := <-got:
				t.Fatalf("the waiter never queued: Lock returned %+v, %v", r.g, r.err)
			default:
				t.Fatalf("the waiter never queued: %d keys", countUnder(t, observer((k+2)%3), prefix+"/"))
			}
		}
		dark.Blackhole()
		if err := holder.Release(ctx, hg); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("member %s dark: waiter's Lock: %v", dark.Name(), r.err)
			}
			if r.g.Token() <= hg.Token() {
				t.Fatalf("waiter's token %d not above the holder's %d", r.g.Token(), hg.Token())
			}
		case <-time.After(handoffBound):
			t.Fatalf("member %s dark: the waiter did not see the handoff within %v", dark.Name(), handoffBound)
		}
		dark.Unblackhole()
		// Close deletes the waiter's key, retrying while its session lives.
		_ = waiter.Close()
		_ = holder.Close()
		cancel()
		// Close deletes the waiter's key with retries; a connection the
		// blackhole left hung fails them until the client drops it.
		if !eventually(30*time.Second, func() bool { return countUnder(t, observer((k+2)%3), prefix+"/") == 0 }) {
			t.Fatalf("keys left under %s 30s after both closed", prefix)
		}
		restoreCluster(t, c)
	}
}

type lockResult struct {
	g   lock.Grant
	err error
}

var _ = embedded.DefaultClusterSize

// A Lock whose key's write goes to a member too slow to answer within one
// request's bound (its bytes held 1.1 s each way) is repeated on the
// client's other members while the caller's context allows: the caller
// gets its lock, not the request's own timeout, and no key is left behind.
func TestLockThroughASlowMember(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	prefix := "/safety/hardening/" + t.Name()
	cli := newClientOf(t, c.NewClient) // all three members, in turn
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c.Member(0).Delay(1100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 6 { // the client's balancer takes each member in turn
		if _, err := l.Lock(ctx); err != nil {
			t.Fatalf("Lock %d with member %s slow: %v", i, c.Member(0).Name(), err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d with member %s slow: %v", i, c.Member(0).Name(), err)
		}
	}
	c.Member(0).Undelay()
	keysGone(t, prefix)
}

// A Lock whose every member is slower than one request's bound (the
// client's one member holds its bytes 1.1 s each way, so each round trip
// takes over 2.2 s) still gets its lock while the caller's context allows,
// Unlock still releases it, and no key is left behind: a store that is slow
// but answering is waited for, not given up on and written again forever.
// The first Lock's write runs out of its attempt's bound after it landed:
// its repeat finds the key and keeps it, so the Lock writes one key and
// deletes none.
func TestLockThroughASlowStore(t *testing.T) {
	c, prefix, cli := throughMember0(t)
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before, err := observer(1).Get(context.Background(), "health")
	if err != nil {
		t.Fatal(err)
	}
	c.Member(0).Delay(1100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 2 {
		if _, err := l.Lock(ctx); err != nil {
			t.Fatalf("Lock %d with every member slow: %v", i, err)
		}
		if i == 0 {
			puts, deletes := etcdtest.Writes(t, observer(1), prefix, before.Header.Revision+1)
			if puts != 1 || deletes != 0 {
				t.Errorf("the first Lock wrote %d keys and deleted %d, want 1 and 0", puts, deletes)
			}
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %d with every member slow: %v", i, err)
		}
	}
	c.Member(0).Undelay()
	keysGone(t, prefix)
}

// A semaphore's Acquire through the same slow store writes what it writes
// on a fast one: its first write, which ran out of its attempt's bound
// after it landed, is kept by its repeat, which reads the queue as of the
// revision before it (what the landed transaction read) to find its place.
func TestAcquireThroughASlowStore(t *testing.T) {
	c, prefix, cli := throughMember0(t)
	s, err := etcdio.NewSemaphore(cli, prefix, 2, etcdio.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acquire := func(what string) (puts, deletes int) {
		t.Helper()
		before, err := observer(1).Get(ctx, "health")
		if err != nil {
			t.Fatal(err)
		}
		g, err := s.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire %s: %v", what, err)
		}
		puts, deletes = etcdtest.Writes(t, observer(1), prefix, before.Header.Revision+1)
		if err := s.Release(ctx, g); err != nil {
			t.Fatalf("Release %s: %v", what, err)
		}
		return puts, deletes
	}
	fastPuts, fastDeletes := acquire("on a fast store")
	c.Member(0).Delay(1100 * time.Millisecond)
	slowPuts, slowDeletes := acquire("with every member slow")
	c.Member(0).Undelay()
	if slowPuts != fastPuts || slowDeletes != fastDeletes {
		t.Errorf("Acquire wrote %d keys and deleted %d through a slow store, want %d and %d as on a fast one",
			slowPuts, slowDeletes, fastPuts, fastDeletes)
	}
	keysGone(t, prefix)
}

// Each primitive through a client of all three members, one of which
// stopped answering while its connection stays up (so the client's balancer
// keeps choosing it in turn): every request of a take and a give-back (a
// semaphore's slot claim, a release's delete, a leader's Proclaim, a
// Leader, an Observe's first read, a double barrier's counts) is given up
// at its attempt's bound and made again through another member, rather
// than waiting for the caller's deadline.
func TestThroughASilentMember(t *testing.T) {
	type cycle struct {
		take, give func(context.Context) error
		close      func() error
	}
	kinds := []struct {
		name string
		open func(cli *clientv3.Client, prefix string) (cycle, error)
	}{
		{"lock", func(cli *clientv3.Client, prefix string) (cycle, error) {
			l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(30*time.Second))
			if err != nil {
				return cycle{}, err
			}
			take := func(ctx context.Context) error { _, err := l.Lock(ctx); return err }
			return cycle{take, l.Unlock, l.Close}, nil
		}},
		{"rwlock", func(cli *clientv3.Client, prefix string) (cycle, error) {
			l, err := etcdio.NewRWLock(cli, prefix, etcdio.WithTTL(30*time.Second))
			if err != nil {
				return cycle{}, err
			}
			take := func(ctx context.Context) error { _, err := l.RLock(ctx); return err }
			return cycle{take, l.RUnlock, l.Close}, nil
		}},
		{"semaphore", func(cli *clientv3.Client, prefix string) (cycle, error) {
			m, err := etcdio.NewSemaphore(cli, prefix, 2, etcdio.WithTTL(30*time.Second))
			if err != nil {
				return cycle{}, err
			}
			var g semaphore.Grant
			take := func(ctx context.Context) (err error) { g, err = m.Acquire(ctx); return err }
			give := func(ctx context.Context) error { return m.Release(ctx, g) }
			return cycle{take, give, m.Close}, nil
		}},
		{"election", func(cli *clientv3.Client, prefix string) (cycle, error) {
			e, err := etcdio.NewElection(cli, prefix, etcdio.WithTTL(30*time.Second))
			if err != nil {
				return cycle{}, err
			}
			take := func(ctx context.Context) error {
				if err := e.Campaign(ctx, "v"); err != nil {
					return err
				}
				if err := e.Proclaim(ctx, "w"); err != nil {
					return fmt.Errorf("proclaim: %w", err)
				}
				if _, err := e.Leader(ctx); err != nil {
					return fmt.Errorf("leader: %w", err)
				}
				octx, cancel := context.WithCancel(ctx)
				defer cancel()
				if _, ok := <-e.Observe(octx); !ok {
					return fmt.Errorf("observe: closed before the first leader: %w", ctx.Err())
				}
				return nil
			}
			return cycle{take, e.Resign, e.Close}, nil
		}},
		{"double-barrier", func(cli *clientv3.Client, prefix string) (cycle, error) {
			d, err := etcdio.NewDoubleBarrier(cli, prefix, 1, etcdio.WithTTL(30*time.Second))
			if err != nil {
				return cycle{}, err
			}
			return cycle{d.Enter, d.Leave, d.Close}, nil
		}},
	}
	cl := cluster(t)
	t.Cleanup(func() { restoreCluster(t, cl) })
	prefix := "/safety/hardening/" + t.Name() + "/"
	cycles := make([]cycle, len(kinds))
	for i, c := range kinds {
		// Connected before the silence, so the balancer counts the member
		// in.
		cli := newClientOf(t, cl.NewClient) // no gRPC keepalive: the silence stays unnoticed
		p, err := c.open(cli, prefix+c.name)
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		cycles[i] = p
	}
	silent := cl.Member(0)
	silent.Blackhole()
	// Concurrently (parallel subtests would run GOMAXPROCS at a time).
	var wg sync.WaitGroup
	for i, c := range kinds {
		wg.Go(func() {
			for j := range 3 { // the balancer takes each member in turn
				// A cycle's requests take 2 s to 8 s each time one meets
				// the silent member.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := cycles[i].take(ctx)
				if err == nil {
					if err = cycles[i].give(ctx); err != nil {
						err = fmt.Errorf("give back: %w", err)
					}
				}
				cancel()
				if err != nil {
					t.Errorf("%s: cycle %d with member %s silent: %v", c.name, j, silent.Name(), err)
					return
				}
			}
		})
	}
	wg.Wait()
	silent.Unblackhole()
	for _, c := range kinds {
		keysGone(t, prefix+c.name)
	}
}

// A session that gives its lease up on its side (no keepalive acknowledged
// within the TTL: its member holds bytes 1.5 s each way, past a 2 s TTL)
// may leave the lease alive in etcd, renewed by the keepalives still on
// their way. Close revokes it anyway, so that its keys go when Close
// returns, not when etcd expires the lease up to a TTL later.
func TestCloseOfALostSessionRevokesItsLease(t *testing.T) {
	c, prefix, cli := throughMember0(t)
	s, err := etcdio.NewSession(cli, etcdio.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	c.Member(0).Delay(1500 * time.Millisecond)
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the session outlived a minute of unacknowledged keepalives")
	}
	c.Member(0).Undelay()
	if err := l.Close(); err != nil {
		t.Logf("lock Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close of the lost session: %v", err)
	}
	if n := countUnder(t, observer(1), prefix+"/"); n != 0 {
		t.Fatalf("%d keys under %s after Close returned (the lease was left to expire)", n, prefix)
	}
}
