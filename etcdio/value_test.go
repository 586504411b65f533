package etcdio_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// keysOf returns the keys under prefix+"/" in creation order.
func keysOf(t *testing.T, cli *clientv3.Client, prefix string) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(testCtx(t, 5*time.Second), prefix+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Kvs
}

// A lock made WithValue writes the value into its holder's and its
// waiters' keys, whose names carry LockKeyTag, so that whoever reads the
// prefix sees who holds and who waits.
func TestLockValue(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	a := newLock(t, cli, prefix, etcdio.WithValue("host-a:101"))
	b := newLock(t, cli, prefix, etcdio.WithValue("host-b:202"))
	ctx := testCtx(t, 10*time.Second)
	g := mustLock(t, a)
	waited := make(chan error, 1)
	go func() { _, err := b.Lock(ctx); waited <- err }()
	testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool { return countKeys(t, cli, prefix) == 2 })
	keys := keysOf(t, cli, prefix)
	for i, want := range []string{"host-a:101", "host-b:202"} {
		if string(keys[i].Value) != want {
			t.Errorf("key %d (%s) has value %q, want %q", i, keys[i].Key, keys[i].Value, want)
		}
		if !strings.Contains(string(keys[i].Key), "-"+etcdio.LockKeyTag) {
			t.Errorf("key %s has no %q tag", keys[i].Key, etcdio.LockKeyTag)
		}
	}
	if string(keys[0].Key) != g.Key {
		t.Errorf("first key %s, the holder's is %s", keys[0].Key, g.Key)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// etcd's concurrency.Mutex (and so etcdctl lock, which uses it) ignores a
// key's value: a lock with a value and a Mutex exclude each other both
// ways.
func TestLockValueExcludesMutex(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	mu := concurrency.NewMutex(etcdSession(t, cli), prefix)
	l := newLock(t, newClient(t), prefix, etcdio.WithValue("host-a:101"))
	ctx := testCtx(t, 10*time.Second)
	g := mustLock(t, l)
	if err := mu.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock while a lock with a value holds: %v, want ErrLocked", err)
	}
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock while the Mutex holds: %v, want ErrLockTaken", err)
	}
	if err := mu.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The key of an older disco's lock (no tag, no value, its own lease)
// ahead in the queue holds: the new lock waits for it and gets a token
// above its creation revision. (The other way round, an older disco waits
// for every key created before its own, whatever its name or value, as
// concurrency.Mutex does: TestLockValueExcludesMutex.)
func TestLockValueBehindOldLayout(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 10*time.Second)
	lease, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), lease.ID) })
	old := fmt.Sprintf("%s/%x-1.1", prefix, int64(lease.ID))
	put, err := cli.Put(ctx, old, "", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	l := newLock(t, cli, prefix, etcdio.WithValue("host-b:202"))
	if _, err := l.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock behind an old disco's key: %v, want ErrLockTaken", err)
	}
	got := make(chan lock.Grant, 1)
	go func() { g, _ := l.Lock(ctx); got <- g }()
	testkit.Eventually(t, 5*time.Second, "the new waiter's key", func() bool { return countKeys(t, cli, prefix) == 2 })
	if _, err := cli.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	g := <-got
	if int64(g.Token()) <= put.Header.Revision {
		t.Fatalf("token %v after the old holder created at %d", g.Token(), put.Header.Revision)
	}
}

// A value over the largest accepted, or WithValue on a constructor that
// is not NewLock's, is refused with an error wrapping
// primitives.ErrInvalidArgument, and nothing is written (no key, no lease).
func TestLockValueRefused(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 10*time.Second)
	before, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func() error{
		"over WithMaxValueSize": func() error {
			_, err := etcdio.NewLock(cli, prefix, etcdio.WithValue("12345678901"), etcdio.WithMaxValueSize(10))
			return err
		},
		"over DefaultMaxValueSize": func() error {
			_, err := etcdio.NewLock(cli, prefix, etcdio.WithValue(strings.Repeat("x", etcdio.DefaultMaxValueSize+1)))
			return err
		},
		"election": func() error { _, err := etcdio.NewElection(cli, prefix, etcdio.WithValue("v")); return err },
		"rwlock":   func() error { _, err := etcdio.NewRWLock(cli, prefix, etcdio.WithValue("v")); return err },
		"session":  func() error { _, err := etcdio.NewSession(cli, etcdio.WithValue("v")); return err },
	}
	for name, c := range cases {
		err := c()
		if !errors.Is(err, primitives.ErrInvalidArgument) || !errors.Is(err, etcdio.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping primitives.ErrInvalidArgument", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	after, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, cli, prefix); n != 0 || len(after.Leases) > len(before.Leases) {
		t.Fatalf("refused constructors left %d keys and %d new leases", n, len(after.Leases)-len(before.Leases))
	}
	// At the limit it is accepted.
	l := newLock(t, cli, prefix, etcdio.WithValue("1234567890"), etcdio.WithMaxValueSize(10))
	mustLock(t, l)
}
