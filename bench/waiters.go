package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing/guard"
)

// The waiters scenario: many waiters parked on one lock, what each costs
// the process while it waits, and whether a handoff still costs etcd the
// same with that queue behind it.

// Defaults of the waiters scenario (flags -waiters, -waiter-sessions).
const (
	defaultWaiters        = 10000
	defaultWaiterSessions = 100
)

// footprint is what the parked waiters cost the process, per waiter.
type footprint struct {
	Waiters  int `json:"waiters"`
	Sessions int `json:"sessions"` // leases held by the waiters
	Clients  int `json:"clients"`
	// Goroutines beyond the waiter's own (the caller blocked in Lock).
	Goroutines float64 `json:"goroutines_per_waiter"`
	HeapBytes  float64 `json:"heap_bytes_per_waiter"`
	// Embedded: the figures include the in-process etcd server's share.
	Embedded bool `json:"includes_embedded_etcd"`
}

// settleLimit bounds the wait for etcd to go quiet once every waiter is
// queued.
const settleLimit = 3 * time.Minute

// settledRate is the request rate (a second, keepalives left out) below
// which parked waiters on `clients` connections count as settled: disco's
// watches ask for progress about once per connection every two to three
// seconds, etcd's Mutex waiters not at all; a queueing still under way
// keeps etcd busier than that (each enqueue reads the whole queue).
func settledRate(clients int) float64 { return float64(clients)/2 + 20 }

// settling is how long the queue took to go quiet after its last key was
// written, and whether it did within settleLimit.
type settling struct {
	Waited  time.Duration `json:"waited_ns"`
	Settled bool          `json:"settled"`
}

// waitersLib opens n owners of one lock over `clients` client connections.
type waitersLib struct {
	name string
	// open returns the owners and a func closing them and their sessions
	// (not the clients), and how many leases they hold.
	open func(clis []*clientv3.Client, prefix string, n int) (ls []locker, leases int, closeAll func(), err error)
}

// discoWaitersLib: every client has one etcdio.Session, shared by the lock
// services of the owners on that client.
var discoWaitersLib = waitersLib{name: "disco", open: func(clis []*clientv3.Client, prefix string, n int) ([]locker, int, func(), error) {
	sessions := make([]*etcdio.Session, len(clis))
	ls := make([]locker, n)
	closeAll := func() {
		closeParallel(len(ls), func(i int) {
			if ls[i] != nil {
				_ = ls[i].close()
			}
		})
		closeParallel(len(sessions), func(i int) {
			if sessions[i] != nil {
				_ = sessions[i].Close()
			}
		})
	}
	for i, cli := range clis {
		s, err := etcdio.NewSession(cli)
		if err != nil {
			closeAll()
			return nil, 0, nil, err
		}
		sessions[i] = s
	}
	for i := range n {
		l, err := etcdio.NewLock(clis[i%len(clis)], prefix, etcdio.WithSession(sessions[i%len(clis)]))
		if err != nil {
			closeAll()
			return nil, 0, nil, err
		}
		ls[i] = discoLocker{l}
	}
	return ls, len(sessions), closeAll, nil
}}

// etcdMutexWaitersLib: concurrency.Mutex names its key after its session's
// lease, so two Mutexes of one session on one prefix would be one owner:
// every owner needs its own session (and lease).
var etcdMutexWaitersLib = waitersLib{name: "etcd-mutex", open: func(clis []*clientv3.Client, prefix string, n int) ([]locker, int, func(), error) {
	ls := make([]locker, n)
	closeAll := func() {
		closeParallel(len(ls), func(i int) {
			if ls[i] != nil {
				_ = ls[i].close()
			}
		})
	}
	var g errgroup.Group
	g.SetLimit(64)
	for i := range n {
		g.Go(func() error {
			s, err := concurrency.NewSession(clis[i%len(clis)])
			if err != nil {
				return err
			}
			ls[i] = &etcdMutexLocker{s: s, m: concurrency.NewMutex(s, prefix)}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		closeAll()
		return nil, 0, nil, err
	}
	return ls, n, closeAll, nil
}}

// closeParallel runs f(0..n-1), 64 at a time.
func closeParallel(n int, f func(i int)) {
	var g errgroup.Group
	g.SetLimit(64)
	for i := range n {
		g.Go(func() error { f(i); return nil })
	}
	_ = g.Wait()
}

// heapAndGoroutines collects garbage and returns the live heap and the
// number of goroutines.
func heapAndGoroutines() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, runtime.NumGoroutine()
}

// runWaiters parks n-1 owners behind a holder on one lock and measures what
// they cost while parked; then lets them hand the lock from one to the next
// (each owner locks again after its turn, so the queue stays n long) and
// measures the handoffs and etcd's load per handoff.
func runWaiters(ctx context.Context, e *env, lib waitersLib, n, clients int, cfg runCfg) (*side, error) {
	prefix := e.prefix(fmt.Sprintf("waiters%d-%s", n, lib.name))
	clis, err := openOwners(e, onEtcd, clients, "client", func(cli *clientv3.Client) (*clientv3.Client, error) { return cli, nil },
		func(*clientv3.Client) error { return nil })
	if err != nil {
		return nil, err
	}
	defer clis.close()
	heap0, g0 := heapAndGoroutines()
	ls, leases, closeAll, err := lib.open(clis.hs, prefix, n)
	if err != nil {
		return nil, fmt.Errorf("%s: open: %w", lib.name, err)
	}
	defer closeAll()

	s := &side{Lib: lib.name}
	var errs errCount
	g := guard.New()
	log := &holdLog{start: time.Now()}
	holderTok, err := ls[0].lock(ctx)
	if err != nil {
		return nil, fmt.Errorf("first holder: %w", err)
	}
	holder := log.acquired(log.now(), log.now(), holderTok)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// Waiters join the queue a batch at a time: ten thousand enqueues at once
	// would overload etcd ("too many requests") and turn into a retry storm.
	const batch = 64
	gates := make([]chan struct{}, (n-1+batch-1)/batch)
	for b := range gates {
		gates[b] = make(chan struct{})
	}
	joined := make([]bool, n-1) // each owner's own
	done := make(chan struct{})
	go func() {
		defer close(done)
		contend(runCtx, n-1, &errs, func(ctx context.Context, i int) error {
			if !joined[i] {
				select {
				case <-gates[i/batch]:
					joined[i] = true
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return holdOnce(ctx, ls[i+1], log, g, &errs, nil)
		})
	}()
	// Parked: every owner's key is in the queue. Each batch is let in once
	// the previous one has queued. A count that fails (a loaded etcd) is
	// tried again.
	probeCli := clis.hs[0]
	for b, gate := range gates {
		close(gate)
		want := int64(min(1+(b+1)*batch, n))
		for {
			gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := probeCli.Get(gctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			cancel()
			if err == nil && resp.Count >= want {
				break
			}
			if err := ctx.Err(); err != nil {
				stop()
				<-done
				return nil, err
			}
			time.Sleep(10 * time.Millisecond) // polling interval
		}
	}
	// Queued is not yet parked: a waiter whose key is written may still be
	// opening its watch and reading what is ahead of it. Wait until etcd
	// is nearly idle, so that neither the footprint nor the window counts
	// the queueing's tail.
	if e.metricsURL != "" {
		waited, ok, err := settle(ctx, e.metricsURL, settledRate(clients), settleLimit)
		if err != nil {
			stop()
			<-done
			return nil, err
		}
		s.Settle = &settling{Waited: waited, Settled: ok}
	}
	heap1, g1 := heapAndGoroutines()
	s.Footprint = &footprint{Waiters: n - 1, Sessions: leases, Clients: clients,
		Goroutines: float64(g1-g0-(n-1)) / float64(n-1),
		HeapBytes:  float64(int64(heap1)-int64(heap0)) / float64(n-1),
		Embedded:   !e.external}

	// Hand off: the first holder lets go and the queue starts moving.
	w := newWindow(ctx, newMeter(e, onEtcd), cfg)
	wctx, wstop := w.runContext(ctx)
	defer wstop()
	context.AfterFunc(wctx, stop)
	log.setReleaseCalled(holder, log.now())
	if err := ls[0].unlock(ctx); err != nil {
		errs.add(fmt.Errorf("first holder's unlock: %w", err))
	} else {
		log.setReleased(holder, log.now())
	}
	<-done
	w.end(ctx)
	// The hold log's clock started before the waiters queued, the window's
	// after: offsets are on the log's.
	at := func(t time.Time) int64 { return int64(t.Sub(log.start)) }
	log.analyze(s, at(w.from), at(w.deadline), &errs)
	errs.into(s)
	if s.Load, err = w.load(func(from, to time.Time) int { return log.count(at(from), at(to)) }); err != nil {
		return nil, err
	}
	return s, nil
}

// waitersScenario: n waiters on one lock over `clients` connections, disco
// (one session per connection) beside etcd's Mutex (one session per waiter).
func waitersScenario(n, clients int) func(ctx context.Context, r *runner) (*result, error) {
	return func(ctx context.Context, r *runner) (*result, error) {
		name := fmt.Sprintf("lock-waiters-%d", n)
		var sides []*side
		for _, lib := range []waitersLib{discoWaitersLib, etcdMutexWaitersLib} {
			r.logf("  %s: %s ...", name, lib.name)
			s, err := runWaiters(ctx, r.env, lib, n, clients, r.cfg)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
			}
			sides = append(sides, s)
		}
		d, m := sides[0], sides[1]
		return &result{Scenario: name,
			Rows: []*row{{Scenario: name, Contenders: n, Baseline: m.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: m}},
			chart: chart{title: fmt.Sprintf("%d waiters on one lock: heap per parked waiter", n), yLabel: "KiB per waiter",
				bars: []bar{{"disco", d.Footprint.HeapBytes / 1024}, {"etcd-mutex", m.Footprint.HeapBytes / 1024}}},
		}, nil
	}
}
