package etcdio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
)

// Names are independent: a primitive on /n never takes the keys of a
// nested name (/n/sub) for keys of its own queue, though etcd ranges the
// nested keys within /n's prefix.
func TestNestedNamesAreIndependent(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 20*time.Second)
	cli := newClient(t)
	n := prefixOf(t)
	nested := newLock(t, newClient(t), n+"/sub")
	mustLock(t, nested)
	nestedRW, err := etcdio.NewRWLock(newClient(t), n+"/rw")
	if err != nil {
		t.Fatal(err)
	}
	defer nestedRW.Close()
	if _, err := nestedRW.RLock(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("lock", func(t *testing.T) {
		l := newLock(t, newClient(t), n)
		g, err := l.TryLock(ctx)
		if err != nil {
			t.Fatalf("TryLock on %s beside a lock held on %s/sub: %v", n, n, err)
		}
		if err := l.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		lctx := testCtx(t, 5*time.Second)
		if _, err := l.Lock(lctx); err != nil {
			t.Fatalf("Lock on %s beside a lock held on %s/sub: %v", n, n, err)
		}
		// And the other way round: both hold at once.
		other := newLock(t, newClient(t), n+"/sub2")
		mustLock(t, other)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// A waiter on n behind a holder on n, with nested keys between.
		holder := newLock(t, newClient(t), n)
		mustLock(t, holder)
		late := newLock(t, newClient(t), n+"/sub3")
		mustLock(t, late)
		got := make(chan error, 1)
		go func() { _, err := l.Lock(testCtx(t, 10*time.Second)); got <- err }()
		testkit.Eventually(t, 5*time.Second, "the waiter's key", func() bool {
			select {
			case err := <-got:
				t.Fatalf("Lock on %s returned %v while another owner held it", n, err)
			default:
			}
			return len(ownKeys(t, cli, n)) == 2
		})
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter on %s behind a released holder and nested keys: %v", n, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("rwlock", func(t *testing.T) {
		l, err := etcdio.NewRWLock(newClient(t), n)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := l.TryLock(ctx); err != nil {
			t.Fatalf("rwlock TryLock on %s beside a lock held on %s/sub: %v", n, n, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.RLock(testCtx(t, 5*time.Second)); err != nil {
			t.Fatalf("rwlock RLock on %s: %v", n, err)
		}
		if err := l.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("election", func(t *testing.T) {
		e, err := etcdio.NewElection(newClient(t), n)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if l, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
			t.Fatalf("Leader of %s with only nested keys under it: %+v, %v; want ErrNoLeader", n, l, err)
		}
		octx := testCtx(t, 10*time.Second)
		obs := e.Observe(octx)
		if first := <-obs; first.Key != "" {
			t.Fatalf("Observe of %s first showed %q as its leader", n, first.Key)
		}
		if err := e.Campaign(testCtx(t, 5*time.Second), "me"); err != nil {
			t.Fatalf("Campaign on %s beside nested keys: %v", n, err)
		}
		term, _ := e.Term()
		if l, err := e.Leader(ctx); err != nil || l.Key != term.Key {
			t.Fatalf("Leader = %+v, %v; want this candidate's key %s", l, err, term.Key)
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// ownKeys returns the keys of name's own lock queue: with a lease, directly
// under name.
func ownKeys(t *testing.T, cli *clientv3.Client, name string) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), name+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 && !strings.Contains(string(kv.Key[len(name)+1:]), "/") {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys
}

// A key without a lease directly under a lock's prefix, named as etcd's
// Mutex names its keys (a lease in hex), is no owner's: the lock's
// keys-only reads cannot tell it from a Mutex key by its name, and a read
// with leases settles it. Lock and TryLock hold past it.
func TestLeaselessKeyInQueueBlocksNobody(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 10*time.Second)
	cli := newClient(t)
	n := prefixOf(t)
	if _, err := cli.Put(ctx, n+"/beef", "not an owner"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Delete(context.Background(), n+"/beef") })
	l := newLock(t, newClient(t), n)
	if _, err := l.Lock(testCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("Lock on %s with a leaseless key under it: %v", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryLock(ctx); err != nil {
		t.Fatalf("TryLock on %s with a leaseless key under it: %v", n, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
