package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/faultsuite"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/zkio"
)

// sites is how many sites the ensemble has: one per worker, each a fault
// proxy in front of every server.
const sites = 3

// ensemble is the fault suite's view of a three-server ensemble.
type ensemble struct {
	zks     []*testserver.ZooKeeper
	proxies [sites][]*faultproxy.Proxy // site -> one proxy per server
	obs     *zk.Conn                   // direct to every server: the nemesis's reads

	mu       sync.Mutex
	sessions map[int64]*zkio.Session // by id: the sessions the workers made
}

var _ faultsuite.Cluster = (*ensemble)(nil)

func startEnsemble(t *testing.T) *ensemble {
	t.Helper()
	e := &ensemble{zks: testserver.StartZooKeeperEnsemble(t, 3), sessions: map[int64]*zkio.Session{}}
	var addrs []string
	for _, z := range e.zks {
		addrs = append(addrs, z.Addr)
	}
	for s := range sites {
		for _, a := range addrs {
			p, err := faultproxy.Listen("127.0.0.1:0", a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			e.proxies[s] = append(e.proxies[s], p)
		}
	}
	obs, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(silent{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(obs.Close)
	e.obs = obs
	return e
}

func (*ensemble) Name() string       { return "zookeeper" }
func (*ensemble) Sites() int         { return sites }
func (*ensemble) TTL() time.Duration { return 2 * time.Second }

func (e *ensemble) Dial(site int) (faultsuite.Client, error) {
	var addrs []string
	for _, p := range e.proxies[site] {
		addrs = append(addrs, p.Addr())
	}
	return zkClient{e, addrs}, nil
}

func (e *ensemble) Restore(ctx context.Context) error {
	for s := range sites {
		for _, p := range e.proxies[s] {
			p.UnblackholeTx()
			p.UnblackholeRx()
		}
	}
	var errs []error
	for i, z := range e.zks {
		if !z.Running() {
			if err := z.Start(); err != nil {
				errs = append(errs, fmt.Errorf("restart server %d: %w", i, err))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	_, err := e.leader(ctx)
	return err
}

// leader returns the index of the server that leads, once every server
// serves and one leads.
func (e *ensemble) leader(ctx context.Context) (int, error) {
	for {
		leader, serving := -1, 0
		for i, z := range e.zks {
			out, err := testserver.FourLetter(z.Addr, "srvr")
			if err != nil {
				continue
			}
			switch {
			case strings.Contains(out, "Mode: leader"):
				leader = i
				serving++
			case strings.Contains(out, "Mode: follower"):
				serving++
			}
		}
		if leader >= 0 && serving == len(e.zks) {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader with every server serving: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling interval
		}
	}
}

// Forgotten: the hold's znode, an ephemeral of its session, is gone.
func (e *ensemble) Forgotten(_ context.Context, _ int, _ int64, key string) (bool, error) {
	ok, _, err := e.obs.Exists(key)
	return err == nil && !ok, err
}

// Leftover: every znode below the primitive's path (the path itself and
// its parents stay, as in Curator's recipes).
func (e *ensemble) Leftover(_ context.Context, root string) ([]string, error) {
	var left []string
	var walk func(p string, keep bool) error
	walk = func(p string, keep bool) error {
		kids, _, err := e.obs.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			c := path.Join(p, k)
			if !keep {
				left = append(left, c)
			}
			if err := walk(c, false); err != nil {
				return err
			}
		}
		return nil
	}
	return left, walk(path.Join(root, "res"), false)
}

// Owned: the ephemeral znodes below the primitive's path that the session
// lease owns.
func (e *ensemble) Owned(ctx context.Context, root string, lease int64) ([]string, error) {
	all, err := e.Leftover(ctx, root)
	if err != nil {
		return nil, err
	}
	var owned []string
	for _, p := range all {
		ok, st, err := e.obs.Exists(p)
		if err != nil {
			return nil, err
		}
		if ok && st.EphemeralOwner == lease {
			owned = append(owned, p)
		}
	}
	return owned, nil
}

// Faults: a follower or the leader killed and restarted (two servers keep
// a quorum; sessions move to them), a holder's site cut off from every
// server until the ensemble expired its session, a holder's session
// expired by the ensemble while it is connected (see expireSession).
func (e *ensemble) Faults() []faultsuite.Fault {
	kill := func(leader bool) func(ctx context.Context, rng *rand.Rand) (faultsuite.Plan, error) {
		return func(ctx context.Context, rng *rand.Rand) (faultsuite.Plan, error) {
			n := len(e.zks)
			target, err := e.leader(ctx)
			if err != nil {
				return faultsuite.Plan{}, err
			}
			if !leader {
				target = (target + 1 + rng.IntN(n-1)) % n
			}
			z := e.zks[target]
			return faultsuite.Plan{Target: fmt.Sprintf("server %d", target), Seize: faultsuite.NoVictim, From: -1, While: faultsuite.Progress,
				Break: func(context.Context, int, int64) error { z.Stop(); return nil },
				Heal:  func(context.Context) error { return z.Start() }}, nil
		}
	}
	cut := func(site int, dark bool) {
		for _, p := range e.proxies[site] {
			if dark {
				p.BlackholeTx()
				p.BlackholeRx()
			} else {
				p.UnblackholeTx()
				p.UnblackholeRx()
			}
		}
	}
	return []faultsuite.Fault{
		{Name: "kill-follower", Plan: kill(false)},
		{Name: "kill-leader", Plan: kill(true)},
		{Name: "partition", Plan: func(context.Context, *rand.Rand) (faultsuite.Plan, error) {
			site := -1
			return faultsuite.Plan{Target: "a holder's site", Seize: faultsuite.Victim, From: -1, While: faultsuite.Expiry,
				Break: func(_ context.Context, s int, _ int64) error { site = s; cut(s, true); return nil },
				Heal:  func(context.Context) error { cut(site, false); return nil }}, nil
		}},
		{Name: "session-expired", Plan: func(_ context.Context, rng *rand.Rand) (faultsuite.Plan, error) {
			z := e.zks[rng.IntN(len(e.zks))]
			return faultsuite.Plan{Target: "a holder's session", Seize: faultsuite.Victim, From: -1, While: faultsuite.Expiry,
				Break: func(_ context.Context, _ int, lease int64) error {
					e.mu.Lock()
					s := e.sessions[lease]
					e.mu.Unlock()
					if s == nil {
						return fmt.Errorf("no session %#x", lease)
					}
					return expireSession(z.Addr, s)
				},
				Heal: func(context.Context) error { return nil }}, nil
		}},
	}
}

// silent drops the ZooKeeper client's log: a server killed on purpose is
// no news.
type silent struct{}

func (silent) Printf(string, ...any) {}

type zkClient struct {
	e       *ensemble
	servers []string
}

func (zkClient) Close() error { return nil }

func (c zkClient) NewSession(ttl time.Duration) (faultsuite.Session, error) {
	s, err := zkio.NewSession(c.servers, zkio.WithSessionTimeout(ttl))
	if err != nil {
		return nil, err
	}
	c.e.mu.Lock()
	c.e.sessions[s.SessionID()] = s
	c.e.mu.Unlock()
	return zkSession{s}, nil
}

type zkSession struct{ s *zkio.Session }

func (s zkSession) NewLock(prefix string) (lock.Service, error) {
	return zkio.NewLock(nil, prefix, zkio.WithSession(s.s))
}

func (s zkSession) NewRWLock(prefix string) (rwlock.Service, error) {
	return zkio.NewRWLock(nil, prefix, zkio.WithSession(s.s))
}

func (s zkSession) NewElection(prefix string) (election.Service, error) {
	return zkio.NewElection(nil, prefix, zkio.WithSession(s.s))
}

func (s zkSession) Err() error     { return s.s.Err() }
func (s zkSession) Close() error   { return s.s.Close() }
func (s zkSession) Hook() any      { return s.s }
func (s zkSession) LeaseID() int64 { return s.s.LeaseID() }
