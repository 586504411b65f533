package main

import (
	"context"
	"fmt"
	"sync"
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

// pauseLimit bounds how long a contention's slice waits, after its window
// closed, for a holder to park at the pause (see contention.slice).
const pauseLimit = 30 * time.Second

// contention is n owners of lib, each in its own client and session, that
// loop Lock -> check the token with a guard (the tiny critical section) ->
// Unlock on one lock, measured slice by slice (slice) while it stays open.
// The owners keep contending from their first slice until close; between
// slices they are paused: the holder keeps the lock, the others stay queued
// behind it, and the store is left alone.
type contention struct {
	lib lockLib
	n   int
	mt  *meter
	os  *owners[locker]
	g   *guard.Guard
	p   pause

	// From the first slice on: the owners' goroutines, their hold log and
	// errors, their acquisitions and how many of them end the slice in
	// progress (counted slices only).
	cancel   context.CancelFunc
	done     chan struct{}
	stopping atomic.Bool
	log      *holdLog
	errs     errCount
	acquired atomic.Int64
	mu       sync.Mutex
	target   int64
	endSlice context.CancelFunc
}

// openContention opens n owners of lib on a prefix of their own.
func openContention(e *env, lib lockLib, n int) (*contention, error) {
	mt := newMeter(e, lib.store)
	os, err := openLockers(e, lib, e.prefix(fmt.Sprintf("contended%d-%s", n, lib.name)), n, mt)
	if err != nil {
		mt.close()
		return nil, err
	}
	return &contention{lib: lib, n: n, mt: mt, os: os, g: guard.New()}, nil
}

// close stops the owners (those still waiting give up, or, with a Lock
// that takes no context, have their turn) and closes them.
func (c *contention) close() {
	if c.done != nil {
		c.stopping.Store(true)
		c.p.resume()
		c.cancel()
		<-c.done
	}
	c.os.close()
	c.mt.close()
}

// start sets the owners contending, once.
func (c *contention) start(ctx context.Context) {
	if c.done != nil {
		return
	}
	c.log = &holdLog{start: time.Now()}
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		contend(ctx, c.n, &c.errs, func(ctx context.Context, i int) error {
			if c.stopping.Load() {
				return errOwnerDone
			}
			if err := holdOnce(ctx, c.os.hs[i], c.log, c.g, &c.errs, c.p.wait); err != nil {
				return err
			}
			n := c.acquired.Add(1)
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.target > 0 && n >= c.target && c.endSlice != nil {
				c.endSlice()
			}
			return nil
		})
	}()
}

// slice lets the owners contend through one window of cfg (the first
// slice starts them) and measures handoffs and waits from the hold log.
// Once the window has ended and the store's load been scraped there, it
// pauses them and returns when a holder has parked at the pause: until the
// next slice, nobody releases, acquires or enqueues.
func (c *contention) slice(ctx context.Context, cfg runCfg) (*side, error) {
	s := &side{Lib: c.lib.name}
	if cfg.ready != nil {
		cfg.ready()
	}
	w := newWindow(ctx, c.mt, cfg)
	errsBefore := c.errs.snapshot()
	parked := c.p.resume()
	c.start(ctx)
	endCtx, end := w.runContext(ctx)
	defer end()
	c.mu.Lock()
	c.endSlice, c.target = end, 0
	if cfg.maxAcq > 0 {
		c.target = c.acquired.Load() + int64(cfg.maxAcq)
	}
	c.mu.Unlock()
	<-endCtx.Done()
	c.p.hold()
	select {
	case <-parked:
	case <-c.done:
	case <-time.After(pauseLimit):
		c.errs.add(fmt.Errorf("no holder paused within %v of the slice's end", pauseLimit))
	}
	if cfg.finished != nil {
		cfg.finished()
	}
	w.end(ctx)

	// The hold log's clock started with the first slice, the window's now.
	at := func(t time.Time) int64 { return int64(t.Sub(c.log.start)) }
	from, to := at(w.from), at(w.deadline)
	if w.counted {
		to = c.log.last() + 1
	}
	var errs errCount
	c.log.analyze(s, from, to, &errs)
	s.Split = c.log.split(from, to)
	errs.addFrom(&c.errs, errsBefore)
	errs.into(s)
	var err error
	if s.Load, err = w.load(func(from, to time.Time) int { return c.log.count(at(from), at(to)) }); err != nil {
		return nil, err
	}
	return s, nil
}

// pause holds a contention's owners between slices: while held, the next
// holder to reach its release waits there (wait), keeping the lock.
type pause struct {
	mu      sync.Mutex
	held    chan struct{} // non-nil while held; closed by resume
	parked  chan struct{} // closed when a holder first waits in a hold
	waiting bool
}

// hold holds the owners from now on.
func (p *pause) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held, p.waiting = make(chan struct{}), false
	}
}

// resume lets the owners go on, and returns a channel that is closed once
// a holder waits in the next hold.
func (p *pause) resume() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.parked = make(chan struct{})
	return p.parked
}

// wait is a holder's, before it releases: while held, it waits there until
// resume or ctx ends.
func (p *pause) wait(ctx context.Context) {
	p.mu.Lock()
	held := p.held
	if held != nil && !p.waiting {
		p.waiting = true
		close(p.parked)
	}
	p.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
}

// runContended measures n owners of lib contending on one lock (see
// contention) through one window of cfg.
func runContended(ctx context.Context, e *env, lib lockLib, n int, cfg runCfg) (*side, error) {
	c, err := openContention(e, lib, n)
	if err != nil {
		return nil, err
	}
	defer c.close()
	return c.slice(ctx, cfg)
}

// holdOnce is one turn of a contending owner, recorded in log: Lock, the
// critical section (present the token to g, as a holder does before it
// touches the protected resource), park (nil: none; it may keep the holder
// there), Unlock. A failed Lock is returned; a stale token or a failed
// Unlock is counted in errs.
func holdOnce(ctx context.Context, l locker, log *holdLog, g *guard.Guard, errs *errCount, park func(context.Context)) error {
	called := log.now()
	tok, err := l.lock(ctx)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	h := log.acquired(called, log.now(), tok)
	if err := g.Check(fencing.Token(tok)); err != nil {
		errs.add(err)
	}
	if park != nil {
		park(ctx)
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

// soloOwner is one owner of lib that loops Lock -> Unlock alone, measured slice
// by slice (slice) while it stays open.
type soloOwner struct {
	lib lockLib
	mt  *meter
	os  *owners[locker]
}

// openSoloOwner opens one owner of lib on a prefix of its own.
func openSoloOwner(e *env, lib lockLib) (*soloOwner, error) {
	mt := newMeter(e, lib.store)
	os, err := openLockers(e, lib, e.prefix("uncontended-"+lib.name), 1, mt)
	if err != nil {
		mt.close()
		return nil, err
	}
	return &soloOwner{lib: lib, mt: mt, os: os}, nil
}

func (u *soloOwner) close() {
	u.os.close()
	u.mt.close()
}

// slice loops Lock -> Unlock through one window of cfg and measures the
// whole cycle and the Lock alone.
func (u *soloOwner) slice(ctx context.Context, cfg runCfg) (*side, error) {
	l := u.os.hs[0]
	s := &side{Lib: u.lib.name}
	var errs errCount
	w := newWindow(ctx, u.mt, cfg)
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
