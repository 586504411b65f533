package etcdio_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// leaveNestedEpoch uses an rwlock on prefix/b once, which leaves its epoch
// key prefix/b.epoch (no lease) under prefix/ for good: the oldest key
// under prefix/, and a key of another name.
func leaveNestedEpoch(t *testing.T, cli *clientv3.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	nested := prefix + "/b"
	t.Cleanup(func() { _ = etcdio.RetireRWLock(context.Background(), cli, nested) })
	n := testkit.ClosedAtEnd[rwlock.Service](t)(etcdio.NewRWLock(cli, nested))
	if _, err := n.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The verifiers judge a name's tokens by its own keys alone: a nested
// name's key, older than every key of the name, neither hides the name's
// holder nor passes for one. Before, the verifiers took the oldest key
// under the prefix for the holder: an rwlock's readers were refused, its
// released writer and a lock's forged token accepted, an election's leader
// refused; and RetireRWLock refused with ErrInUse for good.
func TestVerifiersIgnoreNestedNames(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := context.Background()
	cli := newClient(t)

	t.Run("rwlock", func(t *testing.T) {
		prefix := prefixOf(t)
		leaveNestedEpoch(t, cli, prefix)
		v, err := etcdio.NewVerifier(cli, "rwlock", prefix)
		if err != nil {
			t.Fatal(err)
		}
		a := testkit.ClosedAtEnd[rwlock.Service](t)(etcdio.NewRWLock(cli, prefix))
		r, err := a.RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, v, "a holding reader's token", "", r.Token(), true)
		if err := a.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, v, "the writer's token", "", w.Token(), true)
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		verify(t, v, "a released writer's token", "", w.Token(), false)
		if err := etcdio.RetireRWLock(ctx, cli, prefix); err != nil {
			t.Fatalf("RetireRWLock with nobody on the lock, a nested name's key under it: %v", err)
		}
	})

	t.Run("lock", func(t *testing.T) {
		prefix := prefixOf(t)
		leaveNestedEpoch(t, cli, prefix)
		v, err := etcdio.NewVerifier(cli, "lock", prefix)
		if err != nil {
			t.Fatal(err)
		}
		l := testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, prefix))
		g, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, v, "the holder's token", "", g.Token(), true)
		verify(t, v, "a token from before the holder's key", "", g.Token()-1, false)
	})

	t.Run("election", func(t *testing.T) {
		prefix := prefixOf(t)
		leaveNestedEpoch(t, cli, prefix)
		v, err := etcdio.NewVerifier(cli, "election", prefix)
		if err != nil {
			t.Fatal(err)
		}
		e := testkit.ClosedAtEnd[election.Service](t)(etcdio.NewElection(cli, prefix))
		if err := e.Campaign(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		l, ok := e.Term()
		if !ok {
			t.Fatal("no term after Campaign")
		}
		verify(t, v, "the leader's token", "", l.Token(), true)
	})
}
