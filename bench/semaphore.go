package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// Semaphore scenarios: semPermits permits, semContenders owners (against a
// baseline), and semManyWaiters owners (disco alone), most of them waiting.
const (
	semPermits     = 4
	semContenders  = 32
	semManyWaiters = 256
)

// semWatchGoal: disco's wakeups per acquisition at most this many, on every
// store, whatever the number of waiters (issue 25): a release wakes only
// the waiter it admits, and that waiter's successor learns it is next.
const semWatchGoal = 3.0

// semGoal judges disco's wakeups per acquisition (disco_wakeups_total, the
// same count on every store), n/a where the load was not measured.
func semGoal(d *side) goal {
	name := fmt.Sprintf("wakeups/acq <= %g", semWatchGoal)
	if d.Load == nil || d.Load.Wakeups == nil {
		return goal{Name: name, Status: "n/a", Detail: "load not measured"}
	}
	w := *d.Load.Wakeups
	detail := fmt.Sprintf("disco %.2f wakeups per acquisition", w)
	if d.Load.Store == string(onEtcd) {
		detail += fmt.Sprintf(" (etcd sent %.2f watch events)", d.Load.WatchEvents)
	}
	return judge(name, w <= semWatchGoal, detail)
}

// permitter is one owner's handle on a counting semaphore: acquire returns
// the permit slot held and its fencing token.
type permitter interface {
	acquire(ctx context.Context) (slot int, token int64, err error)
	release(ctx context.Context) error
	close() error
}

type semLib struct {
	name  string
	store store
	open  func(a at) (permitter, error)
}

// discoSemLib is etcdio.NewSemaphore, one session per owner.
var discoSemLib = semLib{name: "disco", store: onEtcd, open: func(a at) (permitter, error) {
	s, err := etcdio.NewSemaphore(a.cli, a.prefix, semPermits, etcdio.WithMetrics(a.mt.m))
	if err != nil {
		return nil, err
	}
	return &discoSem{s: s}, nil
}}

type discoSem struct {
	s semaphore.Service
	g semaphore.Grant
}

func (d *discoSem) acquire(ctx context.Context) (int, int64, error) {
	g, err := d.s.Acquire(ctx)
	d.g = g
	return g.Slot, int64(g.FencingToken), err
}
func (d *discoSem) release(ctx context.Context) error { return d.s.Release(ctx, d.g) }
func (d *discoSem) close() error                      { return d.s.Close() }

// mutexSemLib is a semaphore made of etcd's concurrency.Mutex, one per
// permit (prefix/permit-i), on one session per owner: an owner tries every
// permit's mutex with TryLock from a random start, and if all are held
// queues on a random one with Lock. etcd ships no semaphore recipe.
var mutexSemLib = semLib{name: "etcd-mutex-per-permit", store: onEtcd, open: func(a at) (permitter, error) {
	s, err := concurrency.NewSession(a.cli)
	if err != nil {
		return nil, err
	}
	m := &mutexSem{s: s, held: -1}
	for i := range semPermits {
		m.ms = append(m.ms, concurrency.NewMutex(s, fmt.Sprintf("%s/permit-%d", a.prefix, i)))
	}
	return m, nil
}}

type mutexSem struct {
	s    *concurrency.Session
	ms   []*concurrency.Mutex
	held int
}

func (m *mutexSem) acquire(ctx context.Context) (int, int64, error) {
	start := rand.IntN(len(m.ms))
	for k := range m.ms {
		i := (start + k) % len(m.ms)
		switch err := m.ms[i].TryLock(ctx); err {
		case nil:
			m.held = i
			return i, m.ms[i].Header().Revision, nil
		case concurrency.ErrLocked:
		default:
			return 0, 0, err
		}
	}
	if err := m.ms[start].Lock(ctx); err != nil {
		return 0, 0, err
	}
	m.held = start
	return start, m.ms[start].Header().Revision, nil
}

func (m *mutexSem) release(ctx context.Context) error {
	i := m.held
	m.held = -1
	return m.ms[i].Unlock(ctx)
}
func (m *mutexSem) close() error { return m.s.Close() }

// semScenario: owners owners, each with its own client and session, loop
// acquire -> check the token with its slot's guard -> release on one
// semaphore of semPermits permits; every acquisition checks that no more
// than semPermits hold and that no slot is held twice. With baseline, the
// same against etcd's Mutex per permit. The goal: disco's watch events per
// acquisition (semWatchGoal).
func semScenario(name string, owners int, libs ...semLib) func(ctx context.Context, r *runner) (*result, error) {
	return func(ctx context.Context, r *runner) (*result, error) {
		var sides []*side
		for _, lib := range libs {
			if err := r.env.start(lib.store); err != nil {
				return nil, err
			}
			r.logf("  %s: %s ...", name, lib.name)
			s, err := runSemContended(ctx, r.env, lib, owners, r.cfg)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
			}
			sides = append(sides, s)
		}
		d := sides[0]
		rw := &row{Scenario: name, Contenders: owners, Unit: "acq/s", Latency: "wait", Disco: d}
		cdfs := []series{{"disco wait", d.waits}}
		if len(sides) > 1 {
			m := sides[1]
			rw.Baseline, rw.Base = m.Lib, m
			cdfs = append(cdfs, series{m.Lib + " wait", m.waits})
		}
		rw.Goals = []goal{semGoal(d)}
		return &result{Scenario: name, Rows: []*row{rw},
			chart: chart{title: fmt.Sprintf("Semaphore on %s, %d permits, %d owners: wait per acquisition (CDF)", libs[0].store, semPermits, owners),
				xLabel: "wait (ms)", cdfs: cdfs},
		}, nil
	}
}

func runSemContended(ctx context.Context, e *env, lib semLib, owners int, cfg runCfg) (*side, error) {
	prefix := e.prefix(fmt.Sprintf("sem-%d-%s-%s", owners, lib.store, lib.name))
	mt := newMeter(e, lib.store)
	defer mt.close()
	mt.sessions = owners
	os, err := openOwners(e, lib.store, owners, lib.name, func(cli *clientv3.Client) (permitter, error) { return lib.open(at{cli, prefix, mt}) }, permitter.close)
	if err != nil {
		return nil, err
	}
	defer os.close()
	s := &side{Lib: lib.name}
	var errs errCount
	guards := make([]*guard.Guard, semPermits)
	for i := range guards {
		guards[i] = guard.New()
	}
	w := newWindow(ctx, mt, cfg)
	runCtx, stop := w.runContext(ctx)
	defer stop()
	var holding atomic.Int64
	var inSlot [semPermits]atomic.Bool
	rec := &waits{w: w, s: s}
	contend(runCtx, owners, &errs, func(ctx context.Context, i int) error {
		p := os.hs[i]
		t0 := time.Now()
		slot, tok, err := p.acquire(ctx)
		t1 := time.Now()
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if n := holding.Add(1); n > semPermits {
			errs.add(fmt.Errorf("%d hold at once, %d permits", n, semPermits))
		}
		valid := slot >= 0 && slot < semPermits
		if !valid || inSlot[slot].Swap(true) {
			errs.add(fmt.Errorf("slot %d held twice at once (or out of range)", slot))
		} else if err := guards[slot].Check(fencing.Token(tok)); err != nil {
			errs.add(err)
		}
		rec.acquired(t0, t1)
		if valid {
			inSlot[slot].Store(false)
		}
		holding.Add(-1)
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := p.release(uctx); err != nil {
			errs.add(fmt.Errorf("release: %w", err))
		}
		return nil
	})
	if err := rec.close(ctx, cfg.duration, &errs); err != nil {
		return nil, err
	}
	return s, nil
}
