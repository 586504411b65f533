package embedded

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/ports"
)

// newTestCluster starts a cluster of size members (0: the default size)
// that is closed when t ends.
func newTestCluster(t *testing.T, size int, opts ...Option) *Cluster {
	t.Helper()
	start := time.Now()
	c, err := StartCluster(size, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d-member cluster ready in %v", len(c.Members()), time.Since(start))
	t.Cleanup(func() {
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Errorf("cluster Close: %v", err)
		}
		t.Logf("cluster closed in %v", time.Since(start))
	})
	return c
}

func leader(t *testing.T, c *Cluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	i, err := c.LeaderIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// eventually retries f until it succeeds or the deadline passes: a client
// may see one transient error right after a member goes away.
func eventually(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func putEventually(t *testing.T, c *clientv3.Client, k, v string) {
	t.Helper()
	eventually(t, "Put "+k, func(ctx context.Context) error {
		_, err := c.Put(ctx, k, v)
		return err
	})
}

func restart(t *testing.T, m *Member) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := m.Restart(ctx); err != nil {
		t.Fatalf("Restart %s: %v", m.Name(), err)
	}
	t.Logf("%s restarted in %v", m.Name(), time.Since(start))
}

func stop(t *testing.T, m *Member) {
	t.Helper()
	start := time.Now()
	if err := m.Stop(); err != nil {
		t.Fatalf("Stop %s: %v", m.Name(), err)
	}
	t.Logf("%s stopped in %v", m.Name(), time.Since(start))
	if m.Running() {
		t.Fatalf("%s still running after Stop", m.Name())
	}
}

// checkLocal asserts that member m, read through its own proxy without
// consulting the leader, has key k = want.
func checkLocal(t *testing.T, m *Member, k, want string) {
	t.Helper()
	mc, err := m.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, mc)
	if got := get(t, mc, k, clientv3.WithSerializable()); got != want {
		t.Fatalf("%s: Get(%q) = %q, want %q", m.Name(), k, got, want)
	}
}

func TestClusterStopRestart(t *testing.T) {
	c := newTestCluster(t, 0)
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, cli)
	put(t, cli, "k", "v0")
	if got := get(t, cli, "k"); got != "v0" {
		t.Fatalf("Get = %q", got)
	}

	// Stop a follower: the other two keep serving.
	l := leader(t, c)
	f := c.Member((l + 1) % 3)
	stop(t, f)
	putEventually(t, cli, "k", "v1")
	if got := get(t, cli, "k"); got != "v1" {
		t.Fatalf("Get = %q", got)
	}
	if got := leader(t, c); got != l {
		t.Fatalf("leader moved from %d to %d when a follower stopped", l, got)
	}
	restart(t, f)
	checkLocal(t, f, "k", "v1")

	// Stop the leader: a new one takes over and the cluster keeps serving.
	lm := c.Member(l)
	stop(t, lm)
	nl := leader(t, c)
	if nl == l {
		t.Fatalf("stopped member %d still leader", l)
	}
	putEventually(t, cli, "k", "v2")
	if got := get(t, cli, "k"); got != "v2" {
		t.Fatalf("Get = %q", got)
	}
	for i := range 10 {
		putEventually(t, cli, fmt.Sprintf("n%d", i), "x")
	}
	restart(t, lm)
	checkLocal(t, lm, "k", "v2")
	checkLocal(t, lm, "n9", "x")
	if lm.ID() == 0 || lm.Etcd() == nil || uint64(lm.Etcd().Server.MemberID()) != lm.ID() {
		t.Fatalf("member ID changed across restart")
	}
}

func TestClusterBlackhole(t *testing.T) {
	c := newTestCluster(t, 0)
	m := c.Member(0)
	mc, err := m.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, mc)
	put(t, mc, "k", "v")

	m.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = mc.Get(ctx, "k")
	cancel()
	if err == nil {
		t.Fatal("Get through a blackholed proxy succeeded")
	}
	if ctx.Err() == nil {
		t.Fatalf("Get failed before its deadline: %v", err)
	}

	// The other members are unaffected: peers talk directly.
	oc, err := c.Member(1).NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, oc)
	put(t, oc, "k", "v2")

	m.Unblackhole()
	start := time.Now()
	eventually(t, "Get after Unblackhole", func(ctx context.Context) error {
		_, err := mc.Get(ctx, "k")
		return err
	})
	t.Logf("recovered %v after Unblackhole", time.Since(start))
	if got := get(t, mc, "k"); got != "v2" {
		t.Fatalf("Get = %q, want v2", got)
	}
}

func TestClusterDelay(t *testing.T) {
	c := newTestCluster(t, 0)
	m := c.Member(2)
	mc, err := m.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, mc)
	put(t, mc, "k", "v")

	const d = 100 * time.Millisecond
	m.Delay(d)
	start := time.Now()
	get(t, mc, "k")
	if took := time.Since(start); took < d {
		t.Fatalf("Get through a delayed proxy took %v, want >= %v", took, d)
	} else {
		t.Logf("Get with Delay(%v) took %v", d, took)
	}
	m.Undelay()
	get(t, mc, "k")
}

func TestClusterClose(t *testing.T) {
	c, err := StartCluster(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Member(0).DataDir()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("data dir still there: %v", err)
	}
	if err := c.Member(0).Restart(context.Background()); err != ErrClosed {
		t.Fatalf("Restart after Close = %v, want ErrClosed", err)
	}
}

// With peer proxies, every byte between members passes a proxy: with all
// of them paused no write can commit, and once they resume one does.
// (Without peer proxies the members would commit directly.)
func TestClusterPeerProxies(t *testing.T) {
	c := newTestCluster(t, 3, WithPeerProxies())
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, cli)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, mm := range ml.Members {
		for _, m := range c.Members() {
			if m.Name() == mm.Name && (len(mm.PeerURLs) != 1 || mm.PeerURLs[0] != m.peerProxyURL.String()) {
				t.Errorf("member %s advertises %v, want its peer proxy %s", mm.Name, mm.PeerURLs, m.peerProxyURL.String())
			}
		}
	}
	put(t, cli, "k", "v")

	for _, m := range c.Members() {
		m.PeerProxy().PauseTx()
		m.PeerProxy().PauseRx()
	}
	pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
	_, err = cli.Put(pctx, "k", "cut off")
	pcancel()
	if err == nil {
		t.Fatal("a write committed with every peer link paused")
	}
	for _, m := range c.Members() {
		m.PeerProxy().UnpauseTx()
		m.PeerProxy().UnpauseRx()
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	for {
		_, err := cli.Put(wctx, "k", "v2")
		if err == nil {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("no write committed after the peer links resumed: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval (a new leader is being elected)
	}
	if m := c.Member(0); (&Member{}).PeerProxy() != nil || m.Proxy() == m.PeerProxy() {
		t.Error("PeerProxy of a member without one, or the client proxy")
	}
}

// A stopped member's ports must stay its own until it restarts: any
// connection made on the machine may take a port of the kernel's ephemeral
// range as its local end, so none of a member's ports may come from there.
// (The old ports, kernel-picked, failed this, and a member once could not
// restart: "faultproxy: listen on 127.0.0.1:37895: ... address already in
// use".)
func TestClusterPortsOutsideKernelRange(t *testing.T) {
	c := newTestCluster(t, 1, WithPeerProxies())
	m := c.Member(0)
	kernel := ports.EphemeralStart()
	for _, u := range []url.URL{m.spec.client, m.spec.peer, m.spec.metrics, m.proxyURL, m.peerProxyURL} {
		p, err := strconv.Atoi(u.Port())
		if err != nil || p >= kernel {
			t.Errorf("member port %s is in the kernel's ephemeral range (from %d)", u.Host, kernel)
		}
	}
	stop(t, m)
	restart(t, m)
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient(t, cli)
	putEventually(t, cli, "k", "v")
}
