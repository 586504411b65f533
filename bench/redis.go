package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// redisAddr and zkAddr are the servers the Redis and ZooKeeper lockers of
// the running scenario dial; their lockLib.open ignores the etcd client it
// is given.
var redisAddr, zkAddr string

// redisScenarios are redis-lock-N: lock contention on Redis beside etcd and
// ZooKeeper in the same run, one scenario per contention level: disco on
// etcd, disco on Redis (redisio), disco on ZooKeeper (zkio, when ZooKeeper
// is installed), and the usual Redis lock (SET NX PX, poll while taken, as
// redsync does). Each scenario starts its own redis-server (appendfsync
// always, redisio's safety contract) and ZooKeeper (forceSync=no: it does
// not fsync, unlike the other two). Without redis-server installed there
// are none (-list does not show them).
func redisScenarios(contenders []int) []scenario {
	if testserver.RedisBinary() == "" {
		return nil
	}
	var s []scenario
	for _, n := range contenders {
		name := fmt.Sprintf("redis-lock-%d", n)
		s = append(s, scenario{name: name, run: func(ctx context.Context, r *runner) (*result, error) {
			return redisContended(ctx, r, name, n)
		}})
	}
	return s
}

func redisContended(ctx context.Context, r *runner, name string, n int) (*result, error) {
	dir, err := os.MkdirTemp("", "disco-bench-redis")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := testserver.LaunchRedis(dir)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	redisAddr = srv.Addr
	etcd := lockLib{name: "disco-etcd", open: discoLib.open}
	libs := []lockLib{etcd, redisioLib, setNXLib}
	zks, err := testserver.LaunchZooKeeper(dir, 1)
	switch {
	case errors.Is(err, testserver.ErrNotInstalled):
		r.logf("  %s: ZooKeeper is not installed (%s): no zkio side", name, testserver.ZooKeeperInstall)
	case err != nil:
		return nil, err
	default:
		defer zks[0].Stop()
		zkAddr = zks[0].Addr
		libs = append(libs, zkioLib)
	}
	sides := map[string]*side{}
	for _, lib := range libs {
		r.logf("  %s: %s ...", name, lib.name)
		s, err := runContended(ctx, r.env, lib, n, r.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
		}
		sides[lib.name] = s
	}
	d, e, p := sides[redisioLib.name], sides[etcd.name], sides[setNXLib.name]
	res := &result{Scenario: name,
		Rows: []*row{
			{Scenario: name, Contenders: n, Baseline: e.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: e},
			{Scenario: name, Contenders: n, Baseline: p.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: p},
		},
		chart: chart{title: fmt.Sprintf("Lock on Redis, etcd and ZooKeeper, %d contenders: handoff, CDF", n), xLabel: "handoff (ms)",
			cdfs: []series{{"disco-redis", d.handoffs}, {"disco-etcd", e.handoffs}, {"redis-setnx-poll", p.handoffs}}},
	}
	if z, ok := sides[zkioLib.name]; ok {
		res.Rows = append(res.Rows, &row{Scenario: name, Contenders: n, Baseline: z.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: z})
		res.chart.cdfs = append(res.chart.cdfs, series{"disco-zk", z.handoffs})
	}
	return res, nil
}

// newRedisClient dials the scenario's server: one connection pool per
// owner, as a separate process would have.
func newRedisClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 2})
}

// redisioLib is disco's redisio.NewLock, one session per owner.
var redisioLib = lockLib{name: "disco-redis", open: func(_ *clientv3.Client, prefix string) (locker, error) {
	cli := newRedisClient()
	l, err := redisio.NewLock(cli, prefix)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return redisioLocker{discoLocker{l}, cli}, nil
}, offEtcd: true}

type redisioLocker struct {
	discoLocker
	cli *redis.Client
}

func (l redisioLocker) close() error { return errors.Join(l.discoLocker.close(), l.cli.Close()) }

// setNXLib is the lock most Redis users take (redsync's single-server
// case): SET key random NX PX ttl, retried after a random 50-250 ms (the
// redsync default) while taken; unlock deletes the key if it still holds
// the random value. It issues no fencing token: the bench numbers its
// acquisitions locally so that the hold log can check exclusion.
var setNXLib = lockLib{name: "redis-setnx-poll", open: func(_ *clientv3.Client, prefix string) (locker, error) {
	return &setNX{cli: newRedisClient(), key: prefix}, nil
}, offEtcd: true}

var setNXCount atomic.Int64

var setNXUnlock = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type setNX struct {
	cli   *redis.Client
	key   string
	value string
}

func (l *setNX) lock(ctx context.Context) (int64, error) {
	b := make([]byte, 16)
	rand.Read(b)
	l.value = hex.EncodeToString(b)
	for {
		ok, err := l.cli.SetNX(ctx, l.key, l.value, 10*time.Second).Result()
		if err != nil {
			return 0, err
		}
		if ok {
			return setNXCount.Add(1), nil
		}
		select {
		case <-time.After(50*time.Millisecond + mrand.N(200*time.Millisecond)):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (l *setNX) unlock(ctx context.Context) error {
	n, err := setNXUnlock.Run(ctx, l.cli, []string{l.key}, l.value).Int64()
	if err == nil && n != 1 {
		err = errors.New("redis-setnx-poll: lock expired before unlock")
	}
	return err
}

func (l *setNX) close() error { return l.cli.Close() }

// zkioLib is disco's zkio.NewLock, one ZooKeeper session per owner.
var zkioLib = lockLib{name: "disco-zk", open: func(_ *clientv3.Client, prefix string) (locker, error) {
	l, err := zkio.NewLock([]string{zkAddr}, prefix)
	if err != nil {
		return nil, err
	}
	return discoLocker{l}, nil
}, offEtcd: true}
