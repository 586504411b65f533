package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/internal/faultsuite"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// etcdCluster is the fault suite's view of the shared three-member
// cluster: a site is a member, reached through its fault proxy only.
type etcdCluster struct{ c *embedded.Cluster }

var _ faultsuite.Cluster = etcdCluster{}

func (etcdCluster) Name() string       { return "etcd" }
func (e etcdCluster) Sites() int       { return len(e.c.Members()) }
func (etcdCluster) TTL() time.Duration { return 2 * time.Second }
func (e etcdCluster) Dial(site int) (faultsuite.Client, error) {
	cli, err := e.c.Member(site).NewClient()
	return etcdClient{cli}, err
}

func (e etcdCluster) Restore(context.Context) error {
	return restore(e.c)
}

// Forgotten: the session's lease is gone (its keys with it).
func (e etcdCluster) Forgotten(ctx context.Context, site int, lease int64, _ string) (bool, error) {
	resp, err := observer((site+1)%e.Sites()).TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return false, err
	}
	return resp.TTL <= 0, nil
}

// Leftover: every key under root but a read/write lock's epoch key, which
// outlives its holders by design.
func (etcdCluster) Leftover(ctx context.Context, root string) ([]string, error) {
	resp, err := shared.all.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); k != root+"res"+etcdio.EpochSuffix {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// Owned: the keys under root with the lease. (Not keys-only: etcd answers
// such a read from its index, without the keys' leases.)
func (etcdCluster) Owned(ctx context.Context, root string, lease int64) ([]string, error) {
	resp, err := shared.all.Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if kv.Lease == lease {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys, nil
}

// Faults: a follower or the raft leader stopped and restarted (two members
// keep a quorum), a member cut off from its clients until a holder's lease
// expired, a member slowed down.
func (e etcdCluster) Faults() []faultsuite.Fault {
	kill := func(leader bool) func(ctx context.Context, rng *rand.Rand) (faultsuite.Plan, error) {
		return func(ctx context.Context, rng *rand.Rand) (faultsuite.Plan, error) {
			n := e.Sites()
			target, err := e.c.LeaderIndex(ctx)
			if err != nil {
				return faultsuite.Plan{}, fmt.Errorf("no leader: %w", err)
			}
			if !leader {
				target = (target + 1 + rng.IntN(n-1)) % n
			}
			m := e.c.Member(target)
			return faultsuite.Plan{Target: m.Name(), Seize: faultsuite.VictimSoon, From: target, While: faultsuite.Progress,
				Break: func(context.Context, int, int64) error { return m.Stop() },
				Heal:  m.Restart}, nil
		}
	}
	return []faultsuite.Fault{
		{Name: "kill-follower", Plan: kill(false)},
		{Name: "kill-leader", Plan: kill(true)},
		{Name: "partition", Plan: func(context.Context, *rand.Rand) (faultsuite.Plan, error) {
			var m *embedded.Member
			return faultsuite.Plan{Target: "a holder's member", Seize: faultsuite.Victim, From: -1, While: faultsuite.Expiry,
				Break: func(_ context.Context, site int, _ int64) error { m = e.c.Member(site); m.Blackhole(); return nil },
				Heal:  func(context.Context) error { m.Unblackhole(); return nil }}, nil
		}},
		{Name: "delay", Plan: func(_ context.Context, rng *rand.Rand) (faultsuite.Plan, error) {
			m := e.c.Member(rng.IntN(e.Sites()))
			d := time.Duration(50+rng.IntN(1200)) * time.Millisecond
			return faultsuite.Plan{Target: fmt.Sprintf("%s (by %v)", m.Name(), d), Seize: faultsuite.NoVictim, From: -1, While: faultsuite.Progress,
				Break: func(context.Context, int, int64) error { m.Delay(d); return nil },
				Heal:  func(context.Context) error { m.Undelay(); return nil }}, nil
		}},
	}
}

type etcdClient struct{ cli *clientv3.Client }

func (c etcdClient) Close() error { return c.cli.Close() }

func (c etcdClient) NewSession(ttl time.Duration) (faultsuite.Session, error) {
	s, err := etcdio.NewSession(c.cli, etcdio.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return etcdSession{c.cli, s}, nil
}

type etcdSession struct {
	cli *clientv3.Client
	s   *etcdio.Session
}

func (s etcdSession) NewLock(prefix string) (lock.Service, error) {
	return etcdio.NewLock(s.cli, prefix, etcdio.WithSession(s.s))
}

func (s etcdSession) NewRWLock(prefix string) (rwlock.Service, error) {
	return etcdio.NewRWLock(s.cli, prefix, etcdio.WithSession(s.s))
}

func (s etcdSession) NewElection(prefix string) (election.Service, error) {
	return etcdio.NewElection(s.cli, prefix, etcdio.WithSession(s.s))
}

func (s etcdSession) Err() error     { return s.s.Err() }
func (s etcdSession) Close() error   { return s.s.Close() }
func (s etcdSession) Hook() any      { return s.s }
func (s etcdSession) LeaseID() int64 { return int64(s.s.LeaseID()) }

// restore undoes every fault: all members running, no blackhole, no delay,
// and an agreed leader.
func restore(c *embedded.Cluster) error {
	var errs []error
	for _, mb := range c.Members() {
		mb.Unblackhole()
		mb.Undelay()
		if !mb.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := mb.Restart(ctx); err != nil {
				errs = append(errs, fmt.Errorf("restart %s: %w", mb.Name(), err))
			}
			cancel()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.LeaderIndex(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// The fault suite's check of what a Close leaves sees a key with its
// lease: Owned lists it while it is there.
func TestOwnedListsLeasedKeys(t *testing.T) {
	cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := shared.all.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer shared.all.Revoke(context.Background(), lease.ID)
	root := "/test/" + t.Name() + "/"
	if _, err := shared.all.Put(ctx, root+"held", "", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	keys, err := etcdCluster{}.Owned(ctx, root, int64(lease.ID))
	if err != nil || len(keys) != 1 || keys[0] != root+"held" {
		t.Fatalf("Owned = %v, %v; want the leased key", keys, err)
	}
}
