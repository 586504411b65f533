package etcdio_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// A stale Release names a grant by its creation, not by (key, token, mode):
// a service's 1st and 3rd read grants share a key name and, in one read
// epoch, a token, yet releasing the 1st must not free the 3rd.
func TestRWLockStaleReleaseKeepsLiveGrant(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 20*time.Second)
	rw := newRWLock(t, newClient(t), prefixOf(t))
	first, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rw.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := rw.RUnlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := rw.Release(ctx, first); !errors.Is(err, rwlock.ErrNotHeld) {
		t.Fatalf("Release of the first grant = %v, want ErrNotHeld", err)
	}
	if err := rw.RUnlock(ctx); err != nil {
		t.Fatalf("RUnlock of the live grant after a stale Release: %v", err)
	}
}

// A lock's stale Release likewise never frees the service's later grant.
func TestLockStaleReleaseKeepsLiveGrant(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 20*time.Second)
	l := newLock(t, newClient(t), prefixOf(t))
	first := mustLock(t, l)
	if err := l.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	mustLock(t, l)
	if err := l.Release(ctx, first); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release of a released grant = %v, want ErrNotHeld", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the live grant after a stale Release: %v", err)
	}
}

// Observe parked before its election's mirror loads is answered when the
// election closes: its channel closes, even with a context that never ends.
func TestObserveAnsweredWhenElectionCloses(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	s, err := etcdio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 5; i++ {
		e, err := etcdio.NewElection(cli, prefixOf(t), etcdio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		// Close only once Observe's request is on the loop, before the
		// mirror has loaded: the call is then parked.
		ctx := &doneWatcher{Context: context.Background(), waiting: make(chan struct{})}
		closeErr := make(chan error, 1)
		go func() {
			<-ctx.waiting
			closeErr <- e.Close()
		}()
		obs := make(chan (<-chan election.Leadership), 1)
		go func() { obs <- e.Observe(ctx) }()
		select {
		case ch := <-obs:
			for range ch {
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Observe still blocked 5s after its election was closed")
		}
		if err := <-closeErr; err != nil {
			t.Fatal(err)
		}
	}
}

// doneWatcher is a context that tells when someone first waits on it: a call
// through the loop does so once its request is posted.
type doneWatcher struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *doneWatcher) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// The primitive's own errors: bad input is a clear error from the
// constructor, never a panic, and leaves no lease behind.
func TestConstructorsRejectBadInput(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	leases := func() int {
		resp, err := cli.Leases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Leases)
	}
	before := leases()
	long := "/" + strings.Repeat("x", 2<<20)
	cases := []struct {
		name   string
		prefix string
		opts   []etcdio.Option
		want   string
	}{
		{"empty", "", nil, "empty prefix"},
		{"root", "/", nil, `"/"`},
		{"huge", long, nil, "bytes"},
		{"nil session", "/p", []etcdio.Option{etcdio.WithSession(nil)}, "WithSession(nil)"},
		{"bad suspend", "/p", []etcdio.Option{etcdio.WithSuspendAfter(1.5)}, "WithSuspendAfter"},
	}
	for _, c := range cases {
		for kind, ctor := range map[string]func() error{
			"lock":     func() error { _, err := etcdio.NewLock(cli, c.prefix, c.opts...); return err },
			"rwlock":   func() error { _, err := etcdio.NewRWLock(cli, c.prefix, c.opts...); return err },
			"election": func() error { _, err := etcdio.NewElection(cli, c.prefix, c.opts...); return err },
		} {
			err := ctor()
			if !errors.Is(err, etcdio.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %s: %v, want ErrInvalidArgument mentioning %q", kind, c.name, err, c.want)
			}
			// Backend-free callers (lock.Supervise, election.Supervise)
			// tell bad input from trouble by primitives' sentinel.
			if !errors.Is(err, primitives.ErrInvalidArgument) {
				t.Errorf("%s %s: %v does not wrap primitives.ErrInvalidArgument", kind, c.name, err)
			}
			if err != nil && len(err.Error()) > 512 {
				t.Errorf("%s %s: error of %d bytes", kind, c.name, len(err.Error()))
			}
		}
	}
	if after := leases(); after != before {
		t.Fatalf("%d leases before, %d after rejected constructors", before, after)
	}
}

// A prefix that ends in "/" puts keys where etcd's Mutex does for it.
func TestTrailingSlashPrefixExcludesMutex(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	prefix := prefixOf(t) + "/"
	l := newLock(t, cli, prefix)
	g := mustLock(t, l)
	if !strings.HasPrefix(g.Key, prefix+"/") {
		t.Fatalf("key %s, want it under %s", g.Key, prefix+"/")
	}
	mu := concurrency.NewMutex(etcdSession(t, newClient(t)), prefix)
	if err := mu.TryLock(testCtx(t, 5*time.Second)); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock on %q while disco holds: %v, want ErrLocked", prefix, err)
	}
}

// WithContext bounds construction: against a dead endpoint the constructor
// gives up when ctx ends, not after a fixed 10 s.
func TestWithContextBoundsConstruction(t *testing.T) {
	testkit.NoLeaks(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = etcdio.NewLock(cli, prefixOf(t), etcdio.WithContext(ctx))
	if err == nil {
		t.Fatal("NewLock against a dead endpoint succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("NewLock gave up after %v; WithContext allowed 300ms", d)
	}
}

// A lease revoked by someone else is reported as the lease's end, not as a
// key deleted by another client.
func TestLostReportsRevokedLease(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	l := newLock(t, cli, prefixOf(t))
	events := l.Subscribe(testCtx(t, 10*time.Second))
	g := mustLock(t, l)
	nextEvent(t, events) // Acquired
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(g.LeaseID)); err != nil {
		t.Fatal(err)
	}
	lost, ok := nextEvent(t, events).(primitives.Lost)
	if !ok || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("event %#v, want Lost", lost)
	}
	if strings.Contains(lost.Err.Error(), "deleted by another client") || !strings.Contains(lost.Err.Error(), "lease") {
		t.Fatalf("Lost.Err = %q, want the lease's end as the cause", lost.Err)
	}
}

// A failed Lock returns the zero Grant.
func TestFailedLockReturnsZeroGrant(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	holder, waiter := newLock(t, cli, prefixOf(t)), newLock(t, newClient(t), prefixOf(t))
	mustLock(t, holder)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	g, err := waiter.Lock(ctx)
	if err == nil {
		t.Fatal("Lock succeeded while held")
	}
	if g != (lock.Grant{}) {
		t.Fatalf("failed Lock returned %+v, want the zero Grant", g)
	}
	g, err = waiter.TryLock(testCtx(t, 5*time.Second))
	if !errors.Is(err, lock.ErrLockTaken) || g != (lock.Grant{}) {
		t.Fatalf("TryLock = %+v, %v; want the zero Grant and ErrLockTaken", g, err)
	}
}

// The error of a service whose shared session was closed names the service.
func TestSharedSessionClosedErrorNamesService(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	s, err := etcdio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	prefix := prefixOf(t)
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = l.Lock(testCtx(t, 5*time.Second))
	if !errors.Is(err, primitives.ErrClosed) || !strings.Contains(err.Error(), prefix) {
		t.Fatalf("Lock after the session closed: %v, want ErrClosed naming %s", err, prefix)
	}
}

// Close of a session whose client is closed says so, rather than "context
// canceled".
func TestSessionCloseAfterClientClose(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	s, err := etcdio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	if err := s.Close(); !errors.Is(err, etcdio.ErrClientClosed) {
		t.Fatalf("Close after the client was closed: %v, want ErrClientClosed", err)
	}
}

// RetireRWLock removes the epoch key, and only once the lock is unused.
func TestRetireRWLock(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	prefix := prefixOf(t)
	ctx := testCtx(t, 10*time.Second)
	rw, err := etcdio.NewRWLock(cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	g, err := rw.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdio.RetireRWLock(ctx, cli, prefix); !errors.Is(err, etcdio.ErrInUse) {
		t.Fatalf("RetireRWLock while held: %v, want ErrInUse", err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := etcdio.RetireRWLock(ctx, cli, prefix); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("after RetireRWLock: %v keys (%v)", resp.Count, err)
	}
	// A new rwlock on the retired name still issues higher tokens.
	rw2 := newRWLock(t, cli, prefix)
	g2, err := rw2.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token() <= g.Token() {
		t.Fatalf("token %d after retirement, not above %d", g2.Token(), g.Token())
	}
}

// RetireRWLock and RetireSemaphore refuse a nil context as bad input, with
// nothing deleted, and never panic.
func TestRetireRefusesNilContext(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	var noContext context.Context
	for what, err := range map[string]error{
		"RetireRWLock":    etcdio.RetireRWLock(noContext, cli, prefixOf(t)+"/rw"),
		"RetireSemaphore": etcdio.RetireSemaphore(noContext, cli, prefixOf(t)+"/sem"),
	} {
		if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
			t.Errorf("%s with a nil context: %v, want an error saying nil context, wrapping ErrInvalidArgument", what, err)
		}
	}
}
