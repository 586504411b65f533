package etcdio_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/barrier"
)

// A party whose Leave gave up after its key was deleted may call Leave
// again: it returns once the parties of its own round are gone, whoever of
// the next round has entered meanwhile.
func TestDoubleBarrierLeaveAgainAfterNextRoundEntered(t *testing.T) {
	key := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	a, b := enteredPair(ctx, t, cli, key)
	// b is not the lowest: it deletes its key and waits for a's.
	bctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- b.Leave(bctx) }()
	testkit.Eventually(t, 10*time.Second, "b's key deleted", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	cancel()
	if err := within(t, left, "b's first Leave"); !errors.Is(err, context.Canceled) {
		t.Fatalf("b's first Leave: %v, want context.Canceled", err)
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	c := newDoubleBarrier(t, newClient(t), key, 2) // the next round
	go func() { _ = c.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "c's key", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	if err := b.Leave(lctx); err != nil {
		t.Fatalf("b's second Leave, every party of its round gone: %v", err)
	}
}

// enteredPair returns two parties of a double barrier on key for two that
// entered it, a first (the lowest key), each on a client of its own.
func enteredPair(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) (a, b barrier.DoubleBarrier) {
	t.Helper()
	a = newDoubleBarrier(t, newClient(t), key, 2)
	b = newDoubleBarrier(t, newClient(t), key, 2)
	entered := make(chan error, 1)
	go func() { entered <- a.Enter(ctx) }()
	testkit.Eventually(t, 10*time.Second, "a's key", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	if err := b.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, entered, "a's Enter"); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// gatedKV holds the caller of a chosen Get after etcd answered it, until
// the test lets it go on: a party that read the count and has not yet
// written ready.
type gatedKV struct {
	clientv3.KV
	gate func(key string) (hold <-chan struct{}, ok bool)
}

func (k *gatedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := k.KV.Get(ctx, key, opts...)
	if hold, ok := k.gate(key); ok {
		<-hold
	}
	return resp, err
}

// A party whose Enter ends with its context's error is not counted: the
// party completing the count read it waiting, then it gave up before ready
// was written; the completing party must count again rather than pass the
// barrier with it.
func TestDoubleBarrierGivenUpPartyNotCounted(t *testing.T) {
	key := prefixOf(t)
	cli := newClient(t)
	cliB := newClient(t)
	read, proceed := make(chan struct{}), make(chan struct{})
	var gets atomic.Int32
	cliB.KV = &gatedKV{KV: cliB.KV, gate: func(k string) (<-chan struct{}, bool) {
		// b's second read of the waiters: the count after its own key.
		if k != key+"/waiters/" || gets.Add(1) != 2 {
			return nil, false
		}
		close(read)
		return proceed, true
	}}
	a := newDoubleBarrier(t, newClient(t), key, 2)
	b := newDoubleBarrier(t, cliB, key, 2)
	actx, acancel := context.WithCancel(context.Background())
	defer acancel()
	aerr := make(chan error, 1)
	go func() { aerr <- a.Enter(actx) }()
	testkit.Eventually(t, 10*time.Second, "a's key", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	bctx, bcancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer bcancel()
	berr := make(chan error, 1)
	go func() { berr <- b.Enter(bctx) }()
	<-read // b counted a and itself
	acancel()
	errA := within(t, aerr, "a's Enter")
	close(proceed)
	errB := within(t, berr, "b's Enter")
	if errA != nil && errB == nil {
		t.Fatalf("a's Enter returned %v, yet b passed the barrier counting it", errA)
	}
	if errA == nil && errB != nil {
		t.Fatalf("a passed the barrier, b's Enter returned %v", errB)
	}
}

// The last party of a round to leave deletes its round's ready, never one
// written since: a newcomer cannot enter while a party of the round is in
// (see TestBarrierConformance's Full), so the test writes a next round's
// party key and ready itself, as an Enter that raced that rule would.
func TestDoubleBarrierLeaveKeepsNextRoundsReady(t *testing.T) {
	key := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	a, b := enteredPair(ctx, t, cli, key)
	left := make(chan error, 1)
	go func() { left <- b.Leave(ctx) }() // b waits for a, the lowest
	testkit.Eventually(t, 10*time.Second, "b's key deleted", func() bool { return countKeys(t, cli, key+"/waiters") == 1 })
	t.Cleanup(func() { // the keys the test writes have no lease: a rerun (-count) would find them
		_, _ = cli.Delete(context.Background(), key+"/", clientv3.WithPrefix())
	})
	if _, err := cli.Put(ctx, key+"/waiters/next-round", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, key+"/ready", ""); err != nil {
		t.Fatal(err)
	}
	next, err := cli.Get(ctx, key+"/ready")
	if err != nil || len(next.Kvs) != 1 {
		t.Fatalf("the next round's ready: %v, %v", next, err)
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, left, "b's Leave"); err != nil {
		t.Fatal(err)
	}
	now, err := cli.Get(ctx, key+"/ready")
	if err != nil {
		t.Fatal(err)
	}
	if len(now.Kvs) != 1 || now.Kvs[0].ModRevision != next.Kvs[0].ModRevision {
		t.Fatalf("after the last party of the round before left, ready is %v; want the next round's (revision %d) kept", now.Kvs, next.Kvs[0].ModRevision)
	}
}

// A party whose key someone else deleted is out of the barrier, as on
// every other backend: its Leave waits for the others to leave, as any
// Leave does, rather than fail at once with ErrLost while its session
// lives and the others are still in.
func TestDoubleBarrierLeaveAfterKeyDeleted(t *testing.T) {
	key := prefixOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	a, b := enteredPair(ctx, t, cli, key) // a's key is the lowest
	resp, err := cli.Get(ctx, key+"/waiters/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("the waiters: %v, %v", resp, err)
	}
	if _, err := cli.Delete(ctx, string(resp.Kvs[1].Key)); err != nil { // b's
		t.Fatal(err)
	}
	brief, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := b.Leave(brief); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b's Leave while a is in: %v; want it to wait for a (here until its ctx's deadline)", err)
	}
	left := make(chan error, 1)
	go func() { left <- b.Leave(ctx) }()
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := within(t, left, "b's Leave once a left"); err != nil {
		t.Fatal(err)
	}
	if b.Err() != nil {
		t.Fatalf("b after its Leave: %v", b.Err())
	}
}
