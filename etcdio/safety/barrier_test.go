package safety

import (
	"bytes"
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
)

// carrier returns the member whose proxy hands a client the event of a put
// of probe: the member serving the only watch of probe's key. It puts
// probe with a fresh value until one proxy is seen passing that value on,
// for up to 5 s (the watch may not be open yet).
func carrier(t *testing.T, c *embedded.Cluster, probe string) *embedded.Member {
	t.Helper()
	members := c.Members()
	var value atomic.Pointer[[]byte]
	var seenBy atomic.Int32
	seenBy.Store(-1)
	for i, m := range members {
		m.Proxy().ModifyRx(func(data []byte) []byte {
			if v := value.Load(); v != nil && bytes.Contains(data, *v) {
				seenBy.CompareAndSwap(-1, int32(i))
			}
			return data
		})
	}
	defer func() {
		for _, m := range members {
			m.Proxy().UnmodifyRx()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		v := []byte("probe-" + strconv.Itoa(n) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36))
		value.Store(&v)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := observer(0).Put(ctx, probe, string(v))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if eventually(200*time.Millisecond, func() bool { return seenBy.Load() >= 0 }) {
			return members[seenBy.Load()]
		}
	}
	t.Fatalf("no member passed on an event of %s within 5s: nobody watches it?", probe)
	return nil
}

// A party waiting in a double barrier's Enter whose watch runs through a
// member that goes dark still sees the barrier fill: its wait is a session
// helper's follow, which notices the silence and moves to a new stream. The
// test finds the member carrying the watch (the one passing on an event
// under the barrier's key) and darkens it. The party's client has no gRPC
// keepalives, so only disco's own check can move the watch; the balancer may
// pick the dark member again, each pick costing a quiet spell (2 s), hence
// the bound. The party's TTL outlives a few such picks for its keepalive.
func TestDoubleBarrierEnterSeesReadyWhenItsMemberGoesDark(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	key := "/safety/hardening/" + t.Name()
	t.Cleanup(func() { // after restoreCluster: every member in the light
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = observer(0).Delete(ctx, key+"/", clientv3.WithPrefix())
	})
	const bound = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
	defer cancel()

	waiter, err := etcdio.NewDoubleBarrier(newClientOf(t, c.NewClient), key, 2, etcdio.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	entered := make(chan error, 1)
	go func() { entered <- waiter.Enter(ctx) }()
	if !eventually(5*time.Second, func() bool { return countUnder(t, observer(0), key+"/waiters/") == 1 }) {
		t.Fatal("the waiting party's key was never written")
	}
	dark := carrier(t, c, key+"/probe")
	dark.Blackhole()

	// The party that fills the barrier reaches a member in the light only.
	other := c.Member((dark.Index() + 1) % 3)
	filler, err := etcdio.NewDoubleBarrier(newClientOf(t, other.NewClient), key, 2, etcdio.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	if err := filler.Enter(ctx); err != nil {
		t.Fatal(err)
	}
	filled := time.Now()
	select {
	case err := <-entered:
		if err != nil {
			t.Fatalf("member %s dark: the waiting party's Enter: %v", dark.Name(), err)
		}
		t.Logf("member %s dark: the waiting party saw the barrier fill after %v", dark.Name(), time.Since(filled).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("member %s dark: the waiting party did not see the barrier fill within %v", dark.Name(), bound)
	}
	dark.Unblackhole() // so that the parties' Close can reach etcd
}
