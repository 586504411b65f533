package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipes "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// rwLocker is one owner's handle on a readers-writer lock. Tokens are 0
// when the implementation has none.
type rwLocker interface {
	rlock(ctx context.Context) (int64, error)
	runlock(ctx context.Context) error
	lock(ctx context.Context) (int64, error)
	unlock(ctx context.Context) error
	close() error
}

type rwLockLib struct {
	name  string
	store store
	open  func(a at) (rwLocker, error)
}

var discoRWLib = rwLockLib{name: "disco", store: onEtcd, open: func(a at) (rwLocker, error) {
	s, err := etcdio.NewRWLock(a.cli, a.prefix, etcdio.WithMetrics(a.mt.m))
	if err != nil {
		return nil, err
	}
	return discoRW{s}, nil
}}

type discoRW struct{ s rwlock.Service }

func (d discoRW) rlock(ctx context.Context) (int64, error) {
	g, err := d.s.RLock(ctx)
	return int64(g.FencingToken), err
}
func (d discoRW) runlock(ctx context.Context) error { return d.s.RUnlock(ctx) }
func (d discoRW) lock(ctx context.Context) (int64, error) {
	g, err := d.s.Lock(ctx)
	return int64(g.FencingToken), err
}
func (d discoRW) unlock(ctx context.Context) error { return d.s.Unlock(ctx) }
func (d discoRW) close() error                     { return d.s.Close() }

// etcdRWLib is recipes.RWMutex. It takes no context: a waiting RLock or
// Lock cannot be abandoned, so the loop stops only between acquisitions.
var etcdRWLib = rwLockLib{name: "etcd-rwmutex", store: onEtcd, open: func(a at) (rwLocker, error) {
	s, err := concurrency.NewSession(a.cli)
	if err != nil {
		return nil, err
	}
	return &etcdRW{s: s, m: recipes.NewRWMutex(s, a.prefix)}, nil
}}

type etcdRW struct {
	s *concurrency.Session
	m *recipes.RWMutex
}

func (e *etcdRW) rlock(context.Context) (int64, error) { return 0, e.m.RLock() }
func (e *etcdRW) runlock(context.Context) error        { return e.m.RUnlock() }
func (e *etcdRW) lock(context.Context) (int64, error)  { return 0, e.m.Lock() }
func (e *etcdRW) unlock(context.Context) error         { return e.m.Unlock() }
func (e *etcdRW) close() error                         { return e.s.Close() }

// runRWContended runs n owners that loop: with probability readFrac RLock,
// else Lock; a tiny critical section (a guard check of the token); release.
// It checks that no writer ever overlapped anyone and measures throughput
// (reads and writes together) and the wait of each call.
func runRWContended(ctx context.Context, e *env, lib rwLockLib, n int, readFrac float64, cfg runCfg) (*side, error) {
	prefix := e.prefix(fmt.Sprintf("rw%d-%s", n, lib.name))
	mt := newMeter(e, lib.store)
	defer mt.close()
	mt.sessions = n
	os, err := openOwners(e, lib.store, n, lib.name, func(cli *clientv3.Client) (rwLocker, error) { return lib.open(at{cli, prefix, mt}) }, rwLocker.close)
	if err != nil {
		return nil, err
	}
	defer os.close()
	s := &side{Lib: lib.name}
	var errs errCount
	g := guard.New()
	w := newWindow(ctx, mt, cfg)
	runCtx, stop := w.runContext(ctx)
	defer stop()
	rec := &waits{w: w, s: s}

	var readers, writers atomic.Int64 // holders now, for the exclusion check
	rngs := make([]*rand.Rand, n)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), 42))
	}
	contend(runCtx, n, &errs, func(ctx context.Context, i int) error {
		l := os.hs[i]
		read := rngs[i].Float64() < readFrac
		t0 := time.Now()
		var tok int64
		var err error
		if read {
			tok, err = l.rlock(ctx)
		} else {
			tok, err = l.lock(ctx)
		}
		t1 := time.Now()
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if read {
			readers.Add(1)
			if writers.Load() != 0 {
				errs.add(fmt.Errorf("reader admitted while a writer holds the lock"))
			}
		} else if writers.Add(1) != 1 || readers.Load() != 0 {
			errs.add(fmt.Errorf("writer admitted while others hold the lock"))
		}
		if tok != 0 {
			if err := g.Check(fencing.Token(tok)); err != nil {
				errs.add(err)
			}
		}
		rec.acquired(t0, t1)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if read {
			readers.Add(-1)
			err = l.runlock(uctx)
		} else {
			writers.Add(-1)
			err = l.unlock(uctx)
		}
		if err != nil {
			errs.add(fmt.Errorf("release: %w", err))
		}
		return nil
	})
	if err := rec.close(ctx, cfg.duration, &errs); err != nil {
		return nil, err
	}
	return s, nil
}

// rwContenders is the number of owners in the rwlock scenarios.
const rwContenders = 8

// rwScenario: disco's rwlock against recipes.RWMutex with readFrac reads.
func rwScenario(name string, readFrac float64, libs ...rwLockLib) func(ctx context.Context, r *runner) (*result, error) {
	return func(ctx context.Context, r *runner) (*result, error) {
		var sides []*side
		for _, lib := range libs {
			if err := r.env.start(lib.store); err != nil {
				return nil, err
			}
			r.logf("  %s: %s ...", name, lib.name)
			s, err := runRWContended(ctx, r.env, lib, rwContenders, readFrac, r.cfg)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
			}
			sides = append(sides, s)
		}
		d := sides[0]
		if len(sides) == 1 {
			return solo(name, rwContenders, "acq/s", "wait", d,
				fmt.Sprintf("RWLock on %s, %d owners, %.0f%% reads: wait per call (CDF)", libs[0].store, rwContenders, readFrac*100)), nil
		}
		m := sides[1]
		return &result{Scenario: name,
			Rows: []*row{{Scenario: name, Contenders: rwContenders, Baseline: m.Lib, Unit: "acq/s", Latency: "wait", Disco: d, Base: m}},
			chart: chart{title: fmt.Sprintf("RWLock, %d owners, %.0f%% reads: wait per call (CDF)", rwContenders, readFrac*100),
				xLabel: "wait (ms)", cdfs: []series{{"disco wait", d.waits}, {"etcd-rwmutex wait", m.waits}}},
		}, nil
	}
}
