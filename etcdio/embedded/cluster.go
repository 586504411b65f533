package embedded

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/ports"
)

// DefaultClusterSize is the number of members StartCluster starts when asked
// for size 0.
const DefaultClusterSize = 3

// MaxClusterSize is the largest cluster StartCluster accepts.
const MaxClusterSize = 9

// ErrClosed is returned by operations on a Cluster that has been closed.
var ErrClosed = errors.New("embedded: cluster closed")

// ErrNoMember is returned by methods called on a nil *Member, such as the
// result of Cluster.Member with an index out of range.
var ErrNoMember = errors.New("embedded: no such member")

// leaderPollInterval is how often LeaderIndex re-examines the members.
const leaderPollInterval = 10 * time.Millisecond

// Cluster is a running multi-member etcd cluster. Members talk to each other
// directly (or through proxies, WithPeerProxies); every client byte goes
// through a per-member fault-injecting TCP proxy. Its methods are safe for
// concurrent use.
type Cluster struct {
	o       options
	root    string
	members []*Member
	ports   *ports.Reservation // every member's, held until Close

	mu     sync.Mutex
	closed bool
	err    error
}

// Member is one member of a Cluster. Its methods are safe for concurrent use;
// Stop, Restart and the cluster's Close are serialised per member. Methods
// called on a nil *Member do nothing and return zero values or ErrNoMember.
type Member struct {
	c        *Cluster
	index    int
	spec     memberSpec
	proxyURL url.URL
	// peerProxyURL is where the other members reach this one, through
	// peerPx (WithPeerProxies); zero otherwise.
	peerProxyURL url.URL
	id           uint64

	opMu sync.Mutex // serialises Stop, Restart and Close

	mu         sync.Mutex // guards the fields below
	etcd       *embed.Etcd
	px         *Proxy
	peerPx     *Proxy // nil without WithPeerProxies
	blackholed bool
	delay      time.Duration
}

// Proxy is the fault-injecting TCP proxy in front of a member's port. It
// never loses a byte of a connection that goes on: a paused direction holds
// its bytes and delivers them, and a blackholed one resets, when the light
// returns, each connection that had bytes to carry in the dark (a real
// network delivers a stream's bytes or breaks the connection; an HTTP/2
// connection that lost a frame mid-stream can stay broken for good).
type Proxy = faultproxy.Proxy

// StartCluster starts a cluster of size members (DefaultClusterSize when
// size is 0) on reserved loopback ports (see the package documentation),
// with data in a new temporary directory, and returns once every member is
// ready to serve (normally about a second for three members; at most the
// start timeout). On error nothing is left
// running and the directory has been removed. Call Close when done.
func StartCluster(size int, opts ...Option) (*Cluster, error) {
	if size == 0 {
		size = DefaultClusterSize
	}
	if size < 1 || size > MaxClusterSize {
		return nil, fmt.Errorf("embedded: cluster size %d out of range [1, %d]", size, MaxClusterSize)
	}
	o := buildOptions(opts)
	root, err := os.MkdirTemp("", "disco-etcd-cluster-")
	if err != nil {
		return nil, fmt.Errorf("embedded: creating data directory: %w", err)
	}
	for attempt := 1; ; attempt++ {
		c, err := startCluster(o, root, size)
		if err == nil {
			return c, nil
		}
		if !isAddrInUse(err) || attempt == maxPortAttempts {
			_ = os.RemoveAll(root)
			return nil, err
		}
		// A port was taken, by a process that does not reserve ports,
		// between picking and binding it: start afresh.
		if rerr := removeChildren(root); rerr != nil {
			_ = os.RemoveAll(root)
			return nil, errors.Join(err, rerr)
		}
	}
}

func removeChildren(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func startCluster(o options, root string, size int) (*Cluster, error) {
	const perMember = 5 // client, peer, metrics, client proxy, peer proxy
	// Reserved, not merely free: a member restarts on the same ports.
	reserved, err := ports.Reserve(perMember * size)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	picked := reserved.Ports()
	c := &Cluster{o: o, root: root, ports: reserved}
	peers := make([]string, size)
	for i := range size {
		m := &Member{c: c, index: i}
		p := picked[perMember*i:]
		m.spec = memberSpec{
			name:    fmt.Sprintf("m%d", i),
			dir:     filepath.Join(root, fmt.Sprintf("m%d", i)),
			client:  loopbackURL(p[0]),
			peer:    loopbackURL(p[1]),
			metrics: loopbackURL(p[2]),
			token:   filepath.Base(root),
		}
		m.proxyURL = loopbackURL(p[3])
		advertised := m.spec.peer
		if o.peerProxies {
			m.peerProxyURL = loopbackURL(p[4])
			m.spec.advertisePeer, advertised = m.peerProxyURL, m.peerProxyURL
		}
		peers[i] = m.spec.name + "=" + advertised.String()
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		m.spec.initialCluster = strings.Join(peers, ",")
	}

	fail := func(err error) (*Cluster, error) {
		err = errors.Join(err, c.stopAll())
		reserved.Release()
		return nil, err
	}
	for _, m := range c.members {
		if err := m.start(); err != nil {
			return fail(err)
		}
	}
	ctx, cancel := o.startTimeoutContext()
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Go(func() { errs[i] = waitReady(ctx, m.spec.name, m.runningEtcd()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	for _, m := range c.members {
		m.id = uint64(m.runningEtcd().Server.MemberID())
	}
	return c, nil
}

// Members returns the members, in index order. The slice is a fresh copy.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Member returns member i (0-based), or nil when i is out of range.
func (c *Cluster) Member(i int) *Member {
	if i < 0 || i >= len(c.members) {
		return nil
	}
	return c.members[i]
}

// Endpoints returns every member's proxy URL, in index order: what clients
// should use. The slice is a fresh copy.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// NewClient returns a client for all members (through their proxies) that
// logs nothing. The caller closes it, preferably before closing the cluster.
func (c *Cluster) NewClient() (*clientv3.Client, error) { return NewClient(c.Endpoints()) }

// LeaderIndex waits until the running members agree on a leader, that is,
// one running member considers itself the raft leader and every other
// running member follows it, and returns that member's index. It returns an
// error when ctx ends first (for example while no quorum is running).
func (c *Cluster) LeaderIndex(ctx context.Context) (int, error) {
	t := time.NewTicker(leaderPollInterval)
	defer t.Stop()
	for {
		if i, ok := c.agreedLeader(); ok {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("embedded: no agreed leader: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
}

// agreedLeader reports the index of the leader all running members agree on.
func (c *Cluster) agreedLeader() (int, bool) {
	leader, lead := -1, uint64(0)
	running := 0
	for i, m := range c.members {
		e := m.runningEtcd()
		if e == nil {
			continue
		}
		running++
		l := uint64(e.Server.Leader())
		if l == 0 || (lead != 0 && l != lead) {
			return -1, false
		}
		lead = l
		if l == uint64(e.Server.MemberID()) {
			leader = i
		}
	}
	return leader, running > 0 && leader >= 0
}

// Close stops every member, closes the proxies and removes the data
// directory, normally within a second or two. Open clients should be closed
// first (see Member.Stop). Close is idempotent: later calls return the first
// call's result. After Close, Restart fails with ErrClosed.
//
// etcd's own shutdown leaves some idle HTTP connections between members
// open; both ends are in this process and they close by themselves within
// about five seconds (etcd's peer read timeout). Goroutine-leak checks run
// right after Close should allow for that.
func (c *Cluster) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.err
	}
	c.closed = true
	err := c.stopAll()
	c.ports.Release()
	if rerr := os.RemoveAll(c.root); rerr != nil {
		err = errors.Join(err, fmt.Errorf("embedded: removing data directory: %w", rerr))
	}
	c.err = err
	return err
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// stopAll stops every member: the followers together, then whoever believes
// it leads, so that no member waits for a leadership transfer to a member
// that is itself going away.
func (c *Cluster) stopAll() error {
	var leaders, others []*Member
	for _, m := range c.members {
		if e := m.runningEtcd(); e != nil && e.Server.Leader() == e.Server.MemberID() {
			leaders = append(leaders, m)
		} else {
			others = append(others, m)
		}
	}
	var mu sync.Mutex
	var errs []error
	stop := func(ms []*Member) {
		var wg sync.WaitGroup
		for _, m := range ms {
			wg.Go(func() {
				if err := m.Stop(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	stop(others)
	stop(leaders)
	return errors.Join(errs...)
}

// Index returns the member's 0-based position in the cluster, or -1 for nil.
func (m *Member) Index() int {
	if m == nil {
		return -1
	}
	return m.index
}

// Name returns the member's etcd name ("m0", "m1", ...).
func (m *Member) Name() string {
	if m == nil {
		return ""
	}
	return m.spec.name
}

// ID returns the member's etcd member ID, which survives restarts.
func (m *Member) ID() uint64 {
	if m == nil {
		return 0
	}
	return m.id
}

// Endpoint returns the URL of the member's proxy, "http://127.0.0.1:<port>":
// the address clients use to reach this member. It does not change across
// restarts. While the member is stopped, connections to it are refused.
// (etcd's proxy binds the port on all interfaces, not only loopback.)
func (m *Member) Endpoint() string {
	if m == nil {
		return ""
	}
	return m.proxyURL.String()
}

// ClientURL returns the member's own client URL, bypassing the proxy and
// therefore any fault injected into it.
func (m *Member) ClientURL() string {
	if m == nil {
		return ""
	}
	return m.spec.client.String()
}

// PeerURL returns the URL on which the member talks raft to its peers.
func (m *Member) PeerURL() string {
	if m == nil {
		return ""
	}
	return m.spec.peer.String()
}

// MetricsURL returns the URL of the member's Prometheus metrics,
// "http://127.0.0.1:<port>/metrics" (process-wide numbers; see the package
// documentation).
func (m *Member) MetricsURL() string {
	if m == nil {
		return ""
	}
	return m.spec.metrics.String() + "/metrics"
}

// DataDir returns the member's data directory, kept across restarts and
// removed by the cluster's Close.
func (m *Member) DataDir() string {
	if m == nil {
		return ""
	}
	return m.spec.dir
}

// Running reports whether the member is started (it may still be becoming
// ready, during Restart).
func (m *Member) Running() bool { return m.runningEtcd() != nil }

// Etcd returns the member's embedded server, or nil while it is stopped. Do
// not close it directly; use Stop.
func (m *Member) Etcd() *embed.Etcd { return m.runningEtcd() }

func (m *Member) runningEtcd() *embed.Etcd {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// NewClient returns a client that reaches only this member, through its
// proxy, and logs nothing. The caller closes it.
func (m *Member) NewClient() (*clientv3.Client, error) {
	if m == nil {
		return nil, ErrNoMember
	}
	return NewClient([]string{m.Endpoint()})
}

// Stop stops the member and its proxy, waiting until both are down; the data
// directory is kept. Clients connected to the member see their connections
// end, and new connections are refused until Restart. Stopping the leader
// hands leadership to another member first. Stop typically takes about a
// second (etcd gives the other members' connections that long to drain);
// gRPC's graceful stop can stretch it to about six seconds while client
// streams do not end. Stopping a stopped member does nothing.
func (m *Member) Stop() error {
	if m == nil {
		return ErrNoMember
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	return m.stopLocked()
}

func (m *Member) stopLocked() error {
	m.mu.Lock()
	e, px, peerPx := m.etcd, m.px, m.peerPx
	m.etcd, m.peerPx = nil, nil
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	// Close the proxies alongside the server (a leader's graceful stop may
	// still talk to its peers through its peer proxy): a proxy stops
	// accepting and ends its open connections at once.
	done := make(chan error, 2)
	go func() { done <- closeProxy(px) }()
	go func() { done <- closeProxy(peerPx) }()
	e.Close()
	if err := errors.Join(<-done, <-done); err != nil {
		return fmt.Errorf("embedded: closing proxies of %s: %w", m.spec.name, err)
	}
	return nil
}

// Restart starts the member again with the same name, ID, data directory and
// ports, first stopping it if it is running, and waits until it is ready to
// serve: it has rejoined the cluster and caught up with the log entries
// committed before it rejoined. Faults injected through the member's methods
// (Blackhole, Delay) stay in force. On error, including ctx ending first, the
// member is left stopped. Restart needs a quorum of members running to
// succeed.
func (m *Member) Restart(ctx context.Context) error {
	if m == nil {
		return ErrNoMember
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if m.c.isClosed() {
		return ErrClosed
	}
	if err := m.stopLocked(); err != nil {
		return err
	}
	if err := m.start(); err != nil {
		return err
	}
	if err := waitReady(ctx, m.spec.name, m.runningEtcd()); err != nil {
		return errors.Join(err, m.stopLocked())
	}
	return nil
}

// start starts the server and then its proxy, without waiting for
// readiness. The caller holds opMu or has exclusive access.
func (m *Member) start() error {
	var peerPx *Proxy
	if m.peerProxyURL.Host != "" {
		// Up before the server, so that its peers can reach it as soon as
		// it listens.
		var err error
		if peerPx, err = m.startProxy(m.peerProxyURL, m.spec.peer); err != nil {
			return err
		}
	}
	e, err := m.c.o.startEtcd(m.spec)
	if err != nil {
		return errors.Join(err, closeProxy(peerPx))
	}
	px, err := m.startProxy(m.proxyURL, m.spec.client)
	if err != nil {
		e.Close()
		return errors.Join(err, closeProxy(peerPx))
	}
	m.mu.Lock()
	m.etcd, m.px, m.peerPx = e, px, peerPx
	m.applyFaultsLocked()
	m.mu.Unlock()
	return nil
}

// startProxy starts a proxy that forwards from to to.
func (m *Member) startProxy(from, to url.URL) (*Proxy, error) {
	px, err := faultproxy.Listen(from.Host, to.Host)
	if err != nil {
		return nil, fmt.Errorf("embedded: starting proxy for %s: %w", m.spec.name, err)
	}
	return px, nil
}

// closeProxy closes px; closing a nil proxy does nothing.
func closeProxy(px *Proxy) error {
	if px == nil {
		return nil
	}
	return px.Close()
}

// applyFaultsLocked installs the member's faults on its current proxy.
func (m *Member) applyFaultsLocked() {
	if m.px == nil {
		return
	}
	if m.blackholed {
		m.px.BlackholeTx()
		m.px.BlackholeRx()
	} else {
		m.px.UnblackholeTx()
		m.px.UnblackholeRx()
	}
	for _, px := range []*Proxy{m.px, m.peerPx} {
		if px != nil {
			px.DelayTx(m.delay)
			px.DelayRx(m.delay)
		}
	}
}

// Blackhole cuts the member off from its clients: connections to its proxy
// are accepted and stay open, but no byte passes in either direction, so
// requests through it hang until their deadline. Peer traffic is unaffected.
// Unblackhole resets every connection that had bytes to carry meanwhile
// (they are lost with it, and the client dials anew), as a real partition
// long enough for TCP to give up would; idle connections go on.
func (m *Member) Blackhole() { m.setFaults(func() { m.blackholed = true }) }

// Unblackhole lets bytes through the member's proxy again, after resetting
// the connections that had bytes held by Blackhole.
func (m *Member) Unblackhole() { m.setFaults(func() { m.blackholed = false }) }

// Delay holds every chunk of bytes passing through the member's proxy for d,
// in each direction, so a request and its response take at least 2*d longer.
// In a cluster started WithPeerProxies, the bytes its peers send it and it
// answers them are held as well.
// A non-positive d is the same as Undelay.
func (m *Member) Delay(d time.Duration) { m.setFaults(func() { m.delay = max(d, 0) }) }

// Undelay removes the latency added by Delay.
func (m *Member) Undelay() { m.setFaults(func() { m.delay = 0 }) }

func (m *Member) setFaults(f func()) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
	m.applyFaultsLocked()
}

// Proxy returns the member's current proxy, for faults not covered by the
// Member's own methods (PauseTx, ModifyRx, ...), or nil for a nil Member.
// The proxy is replaced when the member restarts; faults set directly on it
// do not carry over, unlike those set through Blackhole and Delay.
func (m *Member) Proxy() *Proxy {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.px == nil {
		return nil
	}
	return m.px
}

// PeerProxy returns the proxy in front of the member's peer port in a
// cluster started WithPeerProxies, or nil (no such proxy, a nil or stopped
// Member). Like Proxy's, it is replaced when the member restarts.
func (m *Member) PeerProxy() *Proxy {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.peerPx == nil {
		return nil
	}
	return m.peerPx
}
