package etcdio_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/lock"
)

// When the queue turns in the same order (each holder releases and queues
// again behind the others, as contenders in a loop do), a handoff costs the
// waiters no new watch: each waits behind the next key of the session it
// waited behind last time, and keeps following that session's keys. And
// each handoff sends exactly one watch event, to the next holder. (A hold
// here lasts as long as the test takes to see the releaser queued again:
// one that outlives driver.HoldWatchAfter, on a slow machine, has its
// session watch its own keys, which the count leaves out.)
func TestSteadyQueueHandoffCost(t *testing.T) {
	testkit.NoLeaks(t)
	const n, rounds = 3, 30
	ctx := testCtx(t, 60*time.Second)
	prefix := prefixOf(t)
	cli := newClient(t)
	counters := make([]*countingWatcher, n)
	locks := make([]lock.Service, n)
	for i := range locks {
		c := newClient(t)
		counters[i] = &countingWatcher{Watcher: c.Watcher}
		c.Watcher = counters[i]
		// A long TTL: the services watch their own keys only once a hold
		// or a wait outlives a quarter of it, which none does here.
		locks[i] = newLock(t, c, prefix, etcdio.WithTTL(time.Minute))
	}
	keys := func() int64 {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	type result struct {
		g   lock.Grant
		err error
	}
	got := make([]chan result, n)
	for i := range got {
		got[i] = make(chan result, 1)
	}
	lockAsync := func(i int) {
		go func() {
			g, err := locks[i].Lock(ctx)
			got[i] <- result{g, err}
		}()
	}
	held := func(i int) {
		t.Helper()
		select {
		case r := <-got[i]:
			if r.err != nil {
				t.Fatal(r.err)
			}
			counters[i].setOwn(fmt.Sprintf("%s/%x-", prefix, r.g.LeaseID))
		case <-ctx.Done():
			t.Fatalf("lock %d never held", i)
		}
	}
	// Queue 0, 1, 2 in that order, then turn the queue: the holder
	// releases, the next holds, the releaser queues again at the end.
	for i := range n {
		lockAsync(i)
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%d keys queued", i+1), func() bool { return keys() == int64(i+1) })
	}
	held(0)
	var watchesAfterFirstTurn, eventsAfterFirstTurn int64
	for r := range rounds {
		h := r % n
		if r == n {
			// Every service has waited once: its ahead watch is open.
			for _, c := range counters {
				w, e := c.ahead()
				watchesAfterFirstTurn += w
				eventsAfterFirstTurn += e
			}
		}
		if err := locks[h].Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		held((h + 1) % n)
		lockAsync(h)
		testkit.Eventually(t, 10*time.Second, "the releaser queued again", func() bool { return keys() == n })
	}
	var watches, events int64
	for _, c := range counters {
		w, e := c.ahead()
		watches += w
		events += e
	}
	if w := watches - watchesAfterFirstTurn; w != 0 {
		t.Errorf("%d handoffs in a steady queue opened %d watches, want none", rounds-n, w)
	}
	if e := events - eventsAfterFirstTurn; e != rounds-n {
		t.Errorf("%d handoffs in a steady queue sent %d watch events, want one each", rounds-n, e)
	}
	if err := locks[rounds%n].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// countingWatcher counts the watches opened through it and the events
// they delivered, by watched key.
type countingWatcher struct {
	clientv3.Watcher
	mu      sync.Mutex
	own     string // the prefix of its session's own keys
	watches map[string]int64
	events  map[string]int64
}

func (w *countingWatcher) setOwn(prefix string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.own = prefix
}

// ahead returns the watches and events of keys other than the session's
// own.
func (w *countingWatcher) ahead() (watches, events int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, n := range w.watches {
		if k != w.own {
			watches += n
		}
	}
	for k, n := range w.events {
		if k != w.own {
			events += n
		}
	}
	return watches, events
}

// all returns the watches and events of every key.
func (w *countingWatcher) all() (watches, events int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.watches {
		watches += n
	}
	for _, n := range w.events {
		events += n
	}
	return watches, events
}

func (w *countingWatcher) add(m *map[string]int64, key string, n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[key] += n
}

func (w *countingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.add(&w.watches, key, 1)
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			w.add(&w.events, key, int64(len(wr.Events)))
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// A short hold is not watched: its session watches its own keys (to notice
// one deleted by someone else) only once a hold outlives
// driver.HoldWatchAfter, so Lock and Unlock at once cost no watch and their
// release sends the session no event.
func TestShortHoldsWatchNothing(t *testing.T) {
	testkit.NoLeaks(t)
	const cycles = 20
	ctx := testCtx(t, 30*time.Second)
	c := newClient(t)
	counter := &countingWatcher{Watcher: c.Watcher}
	c.Watcher = counter
	l := newLock(t, c, prefixOf(t))
	for range cycles {
		if _, err := l.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every key is watched, own ones too. A hold that outlived
	// HoldWatchAfter (a stalled goroutine on a loaded machine) may watch;
	// most do not.
	watches, events := counter.all()
	if watches > cycles/4 || events > cycles/4 {
		t.Errorf("%d short holds opened %d watches and got %d events, want (nearly) none", cycles, watches, events)
	}
}

// countingKV counts the plain reads (Get) a client makes.
type countingKV struct {
	clientv3.KV
	gets atomic.Int64
}

func (kv *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	kv.gets.Add(1)
	return kv.KV.Get(ctx, key, opts...)
}

// A waiter knows the key it waits behind: the watch it opens for it reads
// no keys. Its wait costs the enqueue, the watch and, once the key ahead
// goes, the look that confirms its turn, and no Get.
func TestWaitReadsNoKeys(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := testCtx(t, 30*time.Second)
	prefix := prefixOf(t)
	holder := newLock(t, newClient(t), prefix)
	c := newClient(t)
	kv := &countingKV{KV: c.KV}
	c.KV = kv
	waiter := newLock(t, c, prefix, etcdio.WithTTL(time.Minute))
	e := newElection(t, c, prefix+"-e", etcdio.WithTTL(time.Minute))
	leader := newElection(t, newClient(t), prefix+"-e")

	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leader.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	from := kv.gets.Load()
	locked, campaigned := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx)
		locked <- err
	}()
	go func() { campaigned <- e.Campaign(ctx, "second") }()
	cli := newClient(t)
	testkit.Eventually(t, 10*time.Second, "both waiting", func() bool {
		l, _ := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		c, _ := cli.Get(ctx, prefix+"-e/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return l != nil && c != nil && l.Count == 2 && c.Count == 2
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := leader.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if err := <-campaigned; err != nil {
		t.Fatal(err)
	}
	if n := kv.gets.Load() - from; n != 0 {
		t.Fatalf("a wait and a campaign read keys %d times, want none", n)
	}
}
