package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// verifierSameGoal: Check at the mark with a verifier runs within this
// factor of Check without one (the verifier is never asked then).
const verifierSameGoal = 1.10

// guardVerify: (1) Check of the token at the mark, 64 goroutines, a plain
// guard with a verifier against one without: the same work, as the
// verifier is asked only about tokens above the mark; (2) the cost of a
// raise with a verifier, per backend (memio, etcd, and Redis and ZooKeeper
// when installed): a fresh keyed guard checks the holder's token, one
// Verify each.
func guardVerify(ctx context.Context, r *runner) (*result, error) {
	const name = "guard-verify"
	st := memio.NewStore()
	mem, err := holdFor(ctx, "memio", "/bench/verify", func() (lock.Service, error) { return memio.NewLock(st, "/bench/verify") },
		func() (guard.Verifier, error) { return memio.NewVerifier(st, "lock", "") })
	if err != nil {
		return nil, err
	}
	defer mem.close()

	plain, verified := guard.New(), guard.New(guard.WithVerifier(memVerifierFor(mem)))
	for _, g := range []*guard.Guard{plain, verified} {
		if err := g.Check(mem.tok); err != nil {
			return nil, err
		}
	}
	r.logf("  %s: Check at the mark, %d goroutines, without and with a verifier ...", name, guardStoreGoroutines)
	// In slices, A B B A, so that a change of the machine's load during the
	// run weighs on both sides alike.
	slice := r.cfg
	slice.duration /= 2
	none, with := &side{Lib: "no verifier"}, &side{Lib: "with a verifier"}
	for _, sd := range []*side{none, with, with, none} {
		g := plain
		if sd == with {
			g = verified
		}
		part := runGuard(ctx, sd.Lib, guardStoreGoroutines, func(fencing.Token) error { return g.Check(mem.tok) }, slice)
		sd.addCounts(part)
		sd.rate()
	}
	ratio := ratioOf(none.PerSec, with.PerSec)
	same := &row{Scenario: name + "/at-mark", Contenders: guardStoreGoroutines, Baseline: none.Lib, Unit: "ops/s", Disco: with, Base: none,
		Goals: []goal{judge(fmt.Sprintf("within %.0f%% of no verifier", (verifierSameGoal-1)*100), with.PerSec > 0 && ratio <= verifierSameGoal,
			fmt.Sprintf("%.0f vs %.0f ops/s (without/with %.2f)", with.PerSec, none.PerSec, ratio))}}
	rows := []*row{same}
	bars := []bar{{none.Lib, none.PerSec / 1e6}, {with.Lib, with.PerSec / 1e6}}

	backends := []*heldGrant{mem}
	cli, err := r.env.newClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	prefix := r.env.prefix("verify")
	etcd, err := holdFor(ctx, "etcd", prefix, func() (lock.Service, error) { return etcdio.NewLock(cli, prefix) },
		func() (guard.Verifier, error) { return etcdio.NewVerifier(cli, "lock", "") })
	if err != nil {
		return nil, err
	}
	defer etcd.close()
	backends = append(backends, etcd)

	dir, err := os.MkdirTemp("", "disco-bench-verify-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if testserver.RedisBinary() == "" {
		r.logf("  %s: redis-server is not installed (%s): no Redis row", name, testserver.RedisInstall)
	} else {
		srv, err := testserver.LaunchRedis(dir)
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer rc.Close()
		rg, err := holdFor(ctx, "redis", "bench/verify", func() (lock.Service, error) { return redisio.NewLock(rc, "bench/verify") },
			func() (guard.Verifier, error) { return redisio.NewVerifier(rc, "lock", "") })
		if err != nil {
			return nil, err
		}
		defer rg.close()
		backends = append(backends, rg)
	}
	switch zks, err := testserver.LaunchZooKeeperOn(dir, 1, testserver.ServerJVM); {
	case errors.Is(err, testserver.ErrNotInstalled):
		r.logf("  %s: ZooKeeper is not installed (%s): no ZooKeeper row", name, testserver.ZooKeeperInstall)
	case err != nil:
		return nil, err
	default:
		defer zks[0].Stop()
		s, err := zkio.NewSession([]string{zks[0].Addr})
		if err != nil {
			return nil, err
		}
		defer s.Close()
		zg, err := holdFor(ctx, "zookeeper", "/bench/verify", func() (lock.Service, error) { return zkio.NewLock(nil, "/bench/verify", zkio.WithSession(s)) },
			func() (guard.Verifier, error) { return zkio.NewVerifier(s, "lock", "") })
		if err != nil {
			return nil, err
		}
		defer zg.close()
		backends = append(backends, zg)
	}

	for _, b := range backends {
		r.logf("  %s: raises verified on %s ...", name, b.name)
		sd, err := withEtcdLoad(ctx, r, func() *side { // etcd requests per verified raise (0 but on etcd)
			return runVerifiedRaises(ctx, b.name+" raise, verified", b.v, b.scope, b.tok, r.cfg)
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, &row{Scenario: name + "/raise-" + b.name, Contenders: 1, Unit: "raises/s", Latency: "cycle", Disco: sd})
	}
	return &result{Scenario: name, Rows: rows,
		chart: chart{title: fmt.Sprintf("guard Check at the mark, %d goroutines", guardStoreGoroutines), yLabel: "million ops/s", bars: bars}}, nil
}

// heldGrant is a lock held for a run, and the verifier of its tokens.
type heldGrant struct {
	name  string
	v     guard.Verifier
	scope string
	tok   fencing.Token
	l     lock.Service
}

func (h *heldGrant) close() { h.l.Close() }

func holdFor(ctx context.Context, name, scope string, newLock func() (lock.Service, error), newVerifier func() (guard.Verifier, error)) (*heldGrant, error) {
	l, err := newLock()
	if err != nil {
		return nil, fmt.Errorf("guard-verify: %s lock: %w", name, err)
	}
	g, err := l.Lock(ctx)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("guard-verify: %s lock: %w", name, err)
	}
	v, err := newVerifier()
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("guard-verify: %s verifier: %w", name, err)
	}
	return &heldGrant{name: name, v: v, scope: scope, tok: g.Token(), l: l}, nil
}

// memVerifierFor is h's verifier for an unkeyed guard: scope "" means h's
// scope.
func memVerifierFor(h *heldGrant) guard.Verifier {
	return verifierFunc(func(ctx context.Context, scope string, t fencing.Token) error {
		if scope == "" {
			scope = h.scope
		}
		return h.v.Verify(ctx, scope, t)
	})
}

type verifierFunc func(ctx context.Context, scope string, t fencing.Token) error

func (f verifierFunc) Verify(ctx context.Context, scope string, t fencing.Token) error {
	return f(ctx, scope, t)
}

// runVerifiedRaises has a fresh keyed guard with verifier v check tok of
// scope, one after the other, for cfg.duration: each is a raise from 0,
// so one Verify; it records how long each took.
func runVerifiedRaises(ctx context.Context, lib string, v guard.Verifier, scope string, tok fencing.Token, cfg runCfg) *side {
	return runCycles(ctx, lib, cfg, func() error {
		return guard.NewKeyed(guard.WithVerifier(v)).CheckContext(ctx, scope, tok)
	})
}
