package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// Every primitive on every store, each beside its natural baseline where
// one exists: on etcd etcd's own recipes; on ZooKeeper go-zookeeper's
// zk.Lock for the lock; on Redis a SET NX lock that polls. disco's rwlock,
// election and semaphore on ZooKeeper and Redis stand alone (the Go
// clients ship no such recipe). Each store's scenarios share one server,
// started by the first of them: redis-server with appendfsync always
// (redisio's safety contract), ZooKeeper with forceSync=no (it does not
// fsync, unlike the other two).

// storeLibs are a store's implementations of each primitive: disco's and
// the baselines beside it (nil or absent: none).
type storeLibs struct {
	lock, lockBase lockLib
	rw, rwBase     *rwLockLib
	election       electionLib
	electionBase   *electionLib
	sem, semBase   *semLib
	expiry         bool // the store can run election-failover-expiry
}

var etcdLibs = storeLibs{lock: discoLib, lockBase: etcdMutexLib, rw: &discoRWLib, rwBase: &etcdRWLib,
	election: discoElectionLib, electionBase: &etcdElectionLib, sem: &discoSemLib, semBase: &mutexSemLib, expiry: true}

// primitiveScenarios are the rwlock, election and semaphore scenarios of a
// store, their names beginning with prefix ("" on etcd, "zk-", "redis-").
func primitiveScenarios(prefix string, l storeLibs) []scenario {
	rw := []rwLockLib{*l.rw}
	if l.rwBase != nil {
		rw = append(rw, *l.rwBase)
	}
	el := []electionLib{l.election}
	if l.electionBase != nil {
		el = append(el, *l.electionBase)
	}
	sem := []semLib{*l.sem}
	if l.semBase != nil {
		sem = append(sem, *l.semBase)
	}
	readHeavy, writeHeavy := fmt.Sprintf("%srwlock-read-heavy-%d", prefix, rwContenders), fmt.Sprintf("%srwlock-write-heavy-%d", prefix, rwContenders)
	s := []scenario{
		{name: readHeavy, run: rwScenario(readHeavy, 0.95, rw...)},
		{name: writeHeavy, run: rwScenario(writeHeavy, 0.50, rw...)},
	}
	modes := []failMode{failResign, failClose}
	if l.expiry {
		modes = append(modes, failExpiry)
	}
	for _, mode := range modes {
		name := prefix + "election-failover-" + string(mode)
		s = append(s, scenario{name: name, run: failoverScenario(name, mode, el...)})
	}
	for _, n := range []int{semContenders, semManyWaiters} {
		name := fmt.Sprintf("%ssemaphore-%d-of-%d", prefix, semPermits, n)
		if n == semManyWaiters {
			sem = sem[:1] // disco alone: many waiters are disco's question
		}
		s = append(s, scenario{name: name, run: semScenario(name, n, sem...)})
	}
	return s
}

// storeScenarios are the ZooKeeper and Redis scenarios, for the stores
// installed here (-list shows only those).
func storeScenarios(contenders []int) []scenario {
	var s []scenario
	if testserver.ZooKeeperClasspath() != "" && testserver.LookPath("java") != "" {
		s = append(s, lockScenarios("zk-", contenders, zkioLib, zkLockLib)...)
		s = append(s, storeFlatness("zk-", contenders, zkioLib)...)
		s = append(s, scenario{name: fleetName(onZK), run: fleetScenario(zkFleet)})
		s = append(s, primitiveScenarios("zk-", storeLibs{rw: &zkioRWLib, election: zkioElectionLib, sem: &zkioSemLib})...)
	}
	if testserver.RedisBinary() != "" {
		s = append(s, lockScenarios("redis-", contenders, redisioLib, setNXLib)...)
		s = append(s, storeFlatness("redis-", contenders, redisioLib)...)
		s = append(s, scenario{name: fleetName(onRedis), run: fleetScenario(redisFleet)})
		s = append(s, primitiveScenarios("redis-", storeLibs{rw: &redisioRWLib, election: redisioElectionLib, sem: &redisioSemLib})...)
	}
	return s
}

// lockScenarios are <prefix>lock-N: disco's lock beside base at each level
// of contention.
func lockScenarios(prefix string, contenders []int, disco, base lockLib) []scenario {
	var s []scenario
	for _, n := range contenders {
		name := fmt.Sprintf("%slock-%d", prefix, n)
		s = append(s, scenario{name: name, run: func(ctx context.Context, r *runner) (*result, error) {
			if err := r.env.start(disco.store); err != nil {
				return nil, err
			}
			var sides []*side
			for _, lib := range []lockLib{disco, base} {
				r.logf("  %s: %s ...", name, lib.name)
				sd, err := runContended(ctx, r.env, lib, n, r.cfg)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
				}
				sides = append(sides, sd)
			}
			d, b := sides[0], sides[1]
			return &result{Scenario: name,
				Rows: []*row{{Scenario: name, Contenders: n, Baseline: b.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: b}},
				chart: chart{title: fmt.Sprintf("Lock on %s, %d contenders: handoff, CDF", disco.store, n), xLabel: "handoff (ms)",
					cdfs: []series{{d.Lib + " handoff", d.handoffs}, {b.Lib + " handoff", b.handoffs}}},
			}, nil
		}})
	}
	return s
}

// storeFlatness is <prefix>lock-flatness-2-N, N the highest of contenders,
// if contenders hold 2 and a higher level.
func storeFlatness(prefix string, contenders []int, disco lockLib) []scenario {
	top := slices.Max(append([]int{0}, contenders...))
	if top <= flatnessBase || !slices.Contains(contenders, flatnessBase) {
		return nil
	}
	return []scenario{flatnessScenario(prefix, disco, top)}
}

// solo is the result of a scenario whose disco side stands alone.
func solo(name string, n int, unit, latency string, d *side, title string) *result {
	rw := &row{Scenario: name, Contenders: n, Unit: unit, Latency: latency, Disco: d}
	cdfs := []series{{"disco wait", d.waits}}
	if latency == "failover" {
		cdfs = append(cdfs, series{"disco failover", d.handoffs})
	}
	return &result{Scenario: name, Rows: []*row{rw}, chart: chart{title: title, xLabel: "latency (ms)", cdfs: cdfs}}
}

// start starts the server of st if it is not running (etcd always is).
func (e *env) start(st store) error {
	switch st {
	case onZK:
		return e.startZK()
	case onRedis:
		return e.startRedis()
	}
	return nil
}

// Redis.

// redisClient dials the run's Redis for one owner, as a separate process
// would (its own connection pool), and has mt close it when the side ends.
func (mt *meter) redisClient() *redis.Client {
	cli := redis.NewClient(&redis.Options{Addr: mt.e.redisAddr, PoolSize: 2})
	cli.AddHook(commandCounter{&mt.commands})
	mt.atEnd(func() { _ = cli.Close() })
	return cli
}

// commandCounter counts the commands a client sends.
type commandCounter struct{ n *atomic.Int64 }

func (c commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// atEnd has close run when the side ends (after its owners are closed).
func (mt *meter) atEnd(close func()) {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	mt.closers = append(mt.closers, close)
}

// close runs what atEnd was given.
func (mt *meter) close() {
	mt.mu.Lock()
	defer mt.mu.Unlock()
	for _, c := range mt.closers {
		c()
	}
	mt.closers = nil
}

var redisioLib = lockLib{name: "disco-redis", store: onRedis, open: func(a at) (locker, error) {
	l, err := redisio.NewLock(a.mt.redisClient(), a.prefix, redisio.WithMetrics(a.mt.m))
	return discoLocker{l}, err
}}

var redisioRWLib = rwLockLib{name: "disco-redis", store: onRedis, open: func(a at) (rwLocker, error) {
	l, err := redisio.NewRWLock(a.mt.redisClient(), a.prefix, redisio.WithMetrics(a.mt.m))
	return discoRW{l}, err
}}

var redisioElectionLib = electionLib{name: "disco-redis", store: onRedis, open: func(a at, ttl time.Duration) (candidate, error) {
	e, err := redisio.NewElection(a.mt.redisClient(), a.prefix, redisio.WithTTL(ttl), redisio.WithMetrics(a.mt.m))
	return discoCandidate{e}, err
}}

var redisioSemLib = semLib{name: "disco-redis", store: onRedis, open: func(a at) (permitter, error) {
	s, err := redisio.NewSemaphore(a.mt.redisClient(), a.prefix, semPermits, redisio.WithMetrics(a.mt.m))
	return &discoSem{s: s}, err
}}

// setNXLib is the lock most Redis users take (redsync's single-server
// case): SET key random NX PX ttl, retried after a random 50-250 ms (the
// redsync default) while taken; unlock deletes the key if it still holds
// the random value. It issues no fencing token: the bench numbers its
// acquisitions locally so that the hold log can check exclusion. It is told
// nothing (counted: 0 events): it polls.
var setNXLib = lockLib{name: "redis-setnx-poll", store: onRedis, counted: true, open: func(a at) (locker, error) {
	return &setNX{cli: a.mt.redisClient(), key: a.prefix}, nil
}}

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

func (l *setNX) close() error { return nil } // the meter closes the client

// ZooKeeper.

func (mt *meter) zkServers() []string { return []string{mt.e.zkAddr} }

var zkioLib = lockLib{name: "disco-zk", store: onZK, open: func(a at) (locker, error) {
	l, err := zkio.NewLock(a.mt.zkServers(), a.prefix, zkio.WithMetrics(a.mt.m))
	return discoLocker{l}, err
}}

var zkioRWLib = rwLockLib{name: "disco-zk", store: onZK, open: func(a at) (rwLocker, error) {
	l, err := zkio.NewRWLock(a.mt.zkServers(), a.prefix, zkio.WithMetrics(a.mt.m))
	return discoRW{l}, err
}}

var zkioElectionLib = electionLib{name: "disco-zk", store: onZK, open: func(a at, ttl time.Duration) (candidate, error) {
	e, err := zkio.NewElection(a.mt.zkServers(), a.prefix, zkio.WithTTL(ttl), zkio.WithMetrics(a.mt.m))
	return discoCandidate{e}, err
}}

var zkioSemLib = semLib{name: "disco-zk", store: onZK, open: func(a at) (permitter, error) {
	s, err := zkio.NewSemaphore(a.mt.zkServers(), a.prefix, semPermits, zkio.WithMetrics(a.mt.m))
	return &discoSem{s: s}, err
}}

// zkLockLib is go-zookeeper's own zk.Lock, one connection (and session)
// per owner. It issues no fencing token (its znode's czxid is not
// exposed): the bench numbers its acquisitions locally, as setNX's. Its
// watch events are counted by its connection's event callback. Its Lock
// takes no context: a waiting owner stops only once it got its turn.
var zkLockLib = lockLib{name: "zk-lock", store: onZK, counted: true, open: func(a at) (locker, error) {
	conn, err := zkConnect(a.mt.zkServers(), func(ev zk.Event) {
		if ev.Type != zk.EventSession && ev.Type != zk.EventNotWatching {
			a.mt.events.Add(1)
		}
	})
	if err != nil {
		return nil, err
	}
	return &zkLock{conn: conn, l: zk.NewLock(conn, a.prefix, zk.WorldACL(zk.PermAll))}, nil
}}

// zkConnect connects go-zookeeper to servers and returns once the
// connection has its session: go-zookeeper connects in the background and
// fails the requests queued meanwhile if an attempt fails ("could not
// connect to a server"), which 128 connections opened at once against a
// busy server can meet. cb, if not nil, is told of every event.
func zkConnect(servers []string, cb zk.EventCallback) (*zk.Conn, error) {
	conn, events, err := zk.Connect(servers, zkTimeout, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}), zk.WithEventCallback(cb))
	if err != nil {
		return nil, err
	}
	deadline := time.After(zkConnectWithin)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go drain(events)
				return conn, nil
			}
		case <-deadline:
			conn.Close()
			return nil, fmt.Errorf("zookeeper at %v: no session within %v", servers, zkConnectWithin)
		}
	}
}

// zkConnectWithin bounds zkConnect.
const zkConnectWithin = 30 * time.Second

// drain reads a connection's session events until it closes the channel.
func drain(events <-chan zk.Event) {
	for range events {
	}
}

var zkLockCount atomic.Int64

type zkLock struct {
	conn *zk.Conn
	l    *zk.Lock
}

func (z *zkLock) lock(context.Context) (int64, error) {
	if err := z.l.Lock(); err != nil {
		return 0, err
	}
	return zkLockCount.Add(1), nil
}
func (z *zkLock) unlock(context.Context) error { return z.l.Unlock() }
func (z *zkLock) close() error                 { z.conn.Close(); return nil }

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}
