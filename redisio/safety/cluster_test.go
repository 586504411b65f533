package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/faultsuite"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/redisio"
)

// sites is how many sites the server has: one per worker, each a fault
// proxy in front of it.
const sites = 3

// server is the fault suite's view of one redis-server.
type server struct {
	srv     *testserver.Redis
	proxies [sites]*faultproxy.Proxy
	obs     *redis.Client // direct: the nemesis's reads
}

var _ faultsuite.Cluster = (*server)(nil)

func startRedis(t *testing.T) *server {
	t.Helper()
	s := &server{srv: testserver.StartRedis(t)}
	for i := range sites {
		p, err := faultproxy.Listen("127.0.0.1:0", s.srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		s.proxies[i] = p
	}
	s.obs = redis.NewClient(&redis.Options{Addr: s.srv.Addr})
	t.Cleanup(func() { s.obs.Close() })
	return s
}

func (*server) Name() string       { return "redis" }
func (*server) Sites() int         { return sites }
func (*server) TTL() time.Duration { return 2 * time.Second }

func (s *server) Dial(site int) (faultsuite.Client, error) {
	return redisClient{redis.NewClient(&redis.Options{Addr: s.proxies[site].Addr()})}, nil
}

func (s *server) Restore(ctx context.Context) error {
	for _, p := range s.proxies {
		p.UnblackholeTx()
		p.UnblackholeRx()
	}
	for {
		if s.obs.Ping(ctx).Err() == nil {
			return nil
		}
		if !s.srv.Running() {
			if err := s.srv.Restart(); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis does not answer PING: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling interval
		}
	}
}

// Forgotten: the session's key is gone (its holds die with it).
func (s *server) Forgotten(ctx context.Context, _ int, lease int64, _ string) (bool, error) {
	n, err := s.obs.Exists(ctx, fmt.Sprintf("disco/session/%d", lease)).Result()
	return err == nil && n == 0, err
}

// Leftover: every key under root but the primitive's counter (name/seq,
// name/held's copy of it) and a read/write lock's read token, which
// outlive their holders by design (see package redisio).
func (s *server) Leftover(ctx context.Context, root string) ([]string, error) {
	name := root + "res"
	keys, err := s.obs.Keys(ctx, root+"*").Result()
	if err != nil {
		return nil, err
	}
	var left []string
	for _, k := range keys {
		switch k {
		case name + "/seq", name + "/rtok":
		case name + "/held":
			f, err := s.obs.HKeys(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			if len(f) != 1 || f[0] != "n" {
				left = append(left, fmt.Sprintf("%s fields %s", k, strings.Join(f, ",")))
			}
		default:
			left = append(left, k)
		}
	}
	return left, nil
}

// Owned: the holds under root (name/<Created>, hashes) whose field l names
// the session lease.
func (s *server) Owned(ctx context.Context, root string, lease int64) ([]string, error) {
	keys, err := s.obs.Keys(ctx, root+"*").Result()
	if err != nil {
		return nil, err
	}
	var owned []string
	want := strconv.FormatInt(lease, 10)
	for _, k := range keys {
		if t, err := s.obs.Type(ctx, k).Result(); err != nil || t != "hash" {
			continue // gone meanwhile, or not a hold
		}
		l, err := s.obs.HGet(ctx, k, "l").Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if l == want {
			owned = append(owned, k)
		}
	}
	return owned, nil
}

// Faults: the server killed and restarted from its append-only file (no
// one can write meanwhile), a holder's site cut off until its session's
// key expired.
func (s *server) Faults() []faultsuite.Fault {
	return []faultsuite.Fault{
		{Name: "kill-restart", Plan: func(context.Context, *rand.Rand) (faultsuite.Plan, error) {
			return faultsuite.Plan{Target: "the server", Seize: faultsuite.VictimSoon, From: -1, While: faultsuite.Outage,
				Break: func(context.Context, int, int64) error { s.srv.Kill(); return nil },
				Heal:  func(context.Context) error { return s.srv.Restart() }}, nil
		}},
		{Name: "partition", Plan: func(context.Context, *rand.Rand) (faultsuite.Plan, error) {
			var p *faultproxy.Proxy
			return faultsuite.Plan{Target: "a holder's site", Seize: faultsuite.Victim, From: -1, While: faultsuite.Expiry,
				Break: func(_ context.Context, site int, _ int64) error {
					p = s.proxies[site]
					p.BlackholeTx()
					p.BlackholeRx()
					return nil
				},
				Heal: func(context.Context) error {
					if p == nil {
						return errors.New("healing a partition that never began")
					}
					p.UnblackholeTx()
					p.UnblackholeRx()
					return nil
				}}, nil
		}},
	}
}

type redisClient struct{ cli *redis.Client }

func (c redisClient) Close() error { return c.cli.Close() }

func (c redisClient) NewSession(ttl time.Duration) (faultsuite.Session, error) {
	s, err := redisio.NewSession(c.cli, redisio.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return redisSession{c.cli, s}, nil
}

type redisSession struct {
	cli *redis.Client
	s   *redisio.Session
}

func (s redisSession) NewLock(prefix string) (lock.Service, error) {
	return redisio.NewLock(s.cli, prefix, redisio.WithSession(s.s))
}

func (s redisSession) NewRWLock(prefix string) (rwlock.Service, error) {
	return redisio.NewRWLock(s.cli, prefix, redisio.WithSession(s.s))
}

func (s redisSession) NewElection(prefix string) (election.Service, error) {
	return redisio.NewElection(s.cli, prefix, redisio.WithSession(s.s))
}

func (s redisSession) Err() error     { return s.s.Err() }
func (s redisSession) Close() error   { return s.s.Close() }
func (s redisSession) Hook() any      { return s.s }
func (s redisSession) LeaseID() int64 { return s.s.LeaseID() }
