package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives/lock"
)

// locker is one owner's handle on a mutual-exclusion lock, made the way a
// separate process would make it: its own client connection, its own session
// and lease. lock returns the hold's fencing token.
type locker interface {
	lock(ctx context.Context) (token int64, err error)
	unlock(ctx context.Context) error
	close() error
}

// at is where an owner opens: its etcd client (nil off etcd, where the
// owner dials its own), the measurement's prefix (an etcd key prefix, a
// ZooKeeper path, a Redis name), and its side's meter, whose metrics the
// side's disco owners report to.
type at struct {
	cli    *clientv3.Client
	prefix string
	mt     *meter
}

// lockLib is one implementation under test, on store.
type lockLib struct {
	name  string
	store store
	open  func(a at) (locker, error)
	// counted: a baseline whose events bench counts itself (meter.events)
	// or that has none (it polls).
	counted bool
}

// discoLib is disco's etcdio.NewLock, one session per owner.
var discoLib = lockLib{name: "disco", store: onEtcd, open: func(a at) (locker, error) {
	s, err := etcdio.NewLock(a.cli, a.prefix, etcdio.WithMetrics(a.mt.m))
	if err != nil {
		return nil, err
	}
	return discoLocker{s}, nil
}}

type discoLocker struct{ s lock.Service }

func (d discoLocker) lock(ctx context.Context) (int64, error) {
	g, err := d.s.Lock(ctx)
	return int64(g.FencingToken), err
}
func (d discoLocker) unlock(ctx context.Context) error { return d.s.Unlock(ctx) }
func (d discoLocker) close() error                     { return d.s.Close() }

// etcdMutexLib is etcd's own concurrency.Mutex on a concurrency.Session
// with disco's default TTL (etcd's own default is 60 s).
var etcdMutexLib = lockLib{name: "etcd-mutex", store: onEtcd, open: func(a at) (locker, error) {
	s, err := concurrency.NewSession(a.cli, concurrency.WithTTL(int(etcdio.DefaultTTL/time.Second)))
	if err != nil {
		return nil, err
	}
	return &etcdMutexLocker{s: s, m: concurrency.NewMutex(s, a.prefix)}, nil
}}

type etcdMutexLocker struct {
	s *concurrency.Session
	m *concurrency.Mutex
}

func (e *etcdMutexLocker) lock(ctx context.Context) (int64, error) {
	if err := e.m.Lock(ctx); err != nil {
		return 0, err
	}
	// The revision at which the Mutex saw itself first: monotonic across
	// holders, the natural fencing token for concurrency.Mutex.
	return e.m.Header().Revision, nil
}
func (e *etcdMutexLocker) unlock(ctx context.Context) error { return e.m.Unlock(ctx) }
func (e *etcdMutexLocker) close() error                     { return e.s.Close() }

// putDeleteLib is the floor for an uncontended lock: one Put and one Delete
// of a key, the fewest writes any etcd lock can make. It is not a lock.
var putDeleteLib = lockLib{name: "put+delete", store: onEtcd, open: func(a at) (locker, error) {
	return &putDelete{cli: a.cli, key: a.prefix + "/k"}, nil
}}

type putDelete struct {
	cli *clientv3.Client
	key string
}

func (p *putDelete) lock(ctx context.Context) (int64, error) {
	resp, err := p.cli.Put(ctx, p.key, "")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (p *putDelete) unlock(ctx context.Context) error {
	resp, err := p.cli.Delete(ctx, p.key)
	if err == nil && resp.Deleted != 1 {
		err = fmt.Errorf("put+delete: deleted %d keys", resp.Deleted)
	}
	return err
}
func (p *putDelete) close() error { return nil }

// openLockers opens n owners of lib on prefix, measured by mt.
func openLockers(e *env, lib lockLib, prefix string, n int, mt *meter) (*owners[locker], error) {
	mt.sessions, mt.counted = n, lib.counted
	return openOwners(e, lib.store, n, lib.name, func(cli *clientv3.Client) (locker, error) { return lib.open(at{cli, prefix, mt}) }, locker.close)
}

// runContended runs n owners, each in its own client and session, that loop
// Lock -> check the token with a guard (the tiny critical section) -> Unlock
// on one lock, and measures handoffs and waits from the shared hold log.
func runContended(ctx context.Context, e *env, lib lockLib, n int, cfg runCfg) (*side, error) {
	mt := newMeter(e, lib.store)
	defer mt.close()
	os, err := openLockers(e, lib, e.prefix(fmt.Sprintf("contended%d-%s", n, lib.name)), n, mt)
	if err != nil {
		return nil, err
	}
	defer os.close()

	s := &side{Lib: lib.name}
	var errs errCount
	g := guard.New()
	if cfg.ready != nil {
		cfg.ready()
	}
	w := newWindow(ctx, mt, cfg)
	log := &holdLog{start: w.start}
	runCtx, stop := w.runContext(ctx)
	defer stop()
	var total atomic.Int64
	contend(runCtx, n, &errs, func(ctx context.Context, i int) error {
		if err := holdOnce(ctx, os.hs[i], log, g, &errs); err != nil {
			return err
		}
		if cfg.maxAcq > 0 && total.Add(1) >= int64(cfg.maxAcq) {
			stop()
		}
		return nil
	})
	if cfg.finished != nil {
		cfg.finished()
	}
	w.end(ctx)

	to := w.since(w.deadline)
	if w.counted {
		to = log.last() + 1
	}
	log.analyze(s, w.since(w.from), to, &errs)
	s.Split = log.split(w.since(w.from), to)
	errs.into(s)
	if s.Load, err = w.load(func(from, to time.Time) int { return log.count(w.since(from), w.since(to)) }); err != nil {
		return nil, err
	}
	return s, nil
}

// holdOnce is one turn of a contending owner, recorded in log: Lock, the
// critical section (present the token to g, as a holder does before it
// touches the protected resource), Unlock. A failed Lock is returned; a
// stale token or a failed Unlock is counted in errs.
func holdOnce(ctx context.Context, l locker, log *holdLog, g *guard.Guard, errs *errCount) error {
	called := log.now()
	tok, err := l.lock(ctx)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	h := log.acquired(called, log.now(), tok)
	if err := g.Check(fencing.Token(tok)); err != nil {
		errs.add(err)
	}
	log.setReleaseCalled(h, log.now())
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := l.unlock(uctx); err != nil {
		errs.add(fmt.Errorf("unlock: %w", err))
	} else {
		log.setReleased(h, log.now())
	}
	return nil
}

// runUncontended loops Lock -> Unlock with a single owner and measures the
// whole cycle and the Lock alone.
func runUncontended(ctx context.Context, e *env, lib lockLib, cfg runCfg) (*side, error) {
	mt := newMeter(e, lib.store)
	defer mt.close()
	os, err := openLockers(e, lib, e.prefix("uncontended-"+lib.name), 1, mt)
	if err != nil {
		return nil, err
	}
	defer os.close()
	l := os.hs[0]
	s := &side{Lib: lib.name}
	var errs errCount
	w := newWindow(ctx, mt, cfg)
	rec := &waits{w: w, s: s} // one owner: its fields are used directly
	// The window stays open until at least one cycle was measured (a loaded
	// machine can take longer than a short window for one), within reason.
	hardStop := w.deadline.Add(30 * time.Second)
	for {
		t0 := time.Now()
		over := !t0.Before(w.deadline) && (len(s.cycles) > 0 || !t0.Before(hardStop))
		if over || ctx.Err() != nil || w.counted && len(s.cycles) >= cfg.maxAcq {
			break
		}
		if _, err := l.lock(ctx); err != nil {
			errs.add(fmt.Errorf("lock: %w", err))
			continue
		}
		t1 := time.Now()
		if err := l.unlock(ctx); err != nil {
			errs.add(fmt.Errorf("unlock: %w", err))
			continue
		}
		t2 := time.Now()
		rec.at = append(rec.at, t1)
		if !t0.Before(w.from) {
			s.waits = append(s.waits, t1.Sub(t0))
			s.cycles = append(s.cycles, t2.Sub(t0))
		}
	}
	s.Count = len(s.cycles)
	s.Cycle = summarize(s.cycles)
	if err := rec.close(ctx, time.Since(w.from), &errs); err != nil {
		return nil, err
	}
	return s, nil
}

// serialReads is the most reads measureSerialRead times.
const serialReads = 1000

// measureSerialRead times, from one client on an otherwise idle etcd, a
// transaction shaped like a disco waiter's read after its predecessor's
// delete event: one Compare (a key's create revision) and a serializable Get
// of that key, which a member answers from its own state without a
// consensus round. It runs cfg.warmup unmeasured, then times up to
// serialReads reads within cfg.duration (at least one).
func measureSerialRead(ctx context.Context, e *env, cfg runCfg) (dist, error) {
	cli, err := e.newClient()
	if err != nil {
		return dist{}, err
	}
	defer cli.Close()
	key := e.prefix("serializable-read") + "/k"
	put, err := cli.Put(ctx, key, "")
	if err != nil {
		return dist{}, err
	}
	defer func() { _, _ = cli.Delete(context.WithoutCancel(ctx), key) }()
	read := func() error {
		resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", put.Header.Revision)).
			Then(clientv3.OpGet(key, clientv3.WithSerializable())).Commit()
		if err == nil && (!resp.Succeeded || len(resp.Responses[0].GetResponseRange().Kvs) != 1) {
			err = fmt.Errorf("serializable read of %s: compare failed or key missing", key)
		}
		return err
	}
	for warm := time.Now().Add(cfg.warmup); time.Now().Before(warm); {
		if err := read(); err != nil {
			return dist{}, err
		}
	}
	samples := make([]time.Duration, 0, serialReads)
	for deadline := time.Now().Add(cfg.duration); len(samples) < serialReads && (len(samples) == 0 || time.Now().Before(deadline)); {
		t0 := time.Now()
		if err := read(); err != nil {
			return dist{}, err
		}
		samples = append(samples, time.Since(t0))
	}
	return summarize(samples), nil
}
