package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/internal/ctxtime"
)

// The shape every contended run shares: open the owners (each with its own
// client, as separate processes would be), open a window, let each owner loop
// on its own goroutine until the window closes (contend), then read the
// figures of the window and close the owners.

// runCfg says how long one side of a scenario runs.
type runCfg struct {
	warmup   time.Duration // runs but is not recorded
	duration time.Duration // the measured window
	maxAcq   int           // > 0: stop after this many acquisitions (benchmarks), no warmup

	// Benchmarks only: called when the owners are ready and when they have
	// stopped, to keep setup and teardown out of the timing.
	ready, finished func()
}

// window is the clock of one run. Owners run from start; what they do in
// [from, deadline) is measured, and etcd's load is scraped at both ends. A
// counted run (benchmarks, or a scenario that stops after some rounds) has
// no time limit but a safety deadline: it is measured from its start, and
// its load is scraped at its start and when end is called.
type window struct {
	start, from, deadline time.Time
	counted               bool
	probe                 *loadProbe // nil: load not measured
	probeWG               sync.WaitGroup
}

// newWindow opens the window of a run that cfg describes, its load
// measured by mt (nil: not measured).
func newWindow(ctx context.Context, mt *meter, cfg runCfg) *window {
	if cfg.maxAcq > 0 {
		// Benchmarks: no scraping inside the timed region.
		w := &window{start: time.Now(), counted: true}
		w.from, w.deadline = w.start, w.start.Add(time.Hour)
		return w
	}
	w := &window{start: time.Now(), probe: newLoadProbe(mt)}
	w.from = w.start.Add(cfg.warmup)
	w.deadline = w.from.Add(cfg.duration)
	if w.probe != nil {
		w.probeWG.Go(func() {
			w.probe.at(ctx, w.from, &w.probe.before)
			w.probe.at(ctx, w.deadline, &w.probe.after)
		})
	}
	return w
}

// newCountedWindow opens the window of a run that stops after a number of
// rounds, or at the safety deadline limit.
func newCountedWindow(ctx context.Context, mt *meter, limit time.Duration) *window {
	w := &window{start: time.Now(), counted: true, probe: newLoadProbe(mt)}
	w.from, w.deadline = w.start, w.start.Add(limit)
	if w.probe != nil {
		w.probe.at(ctx, w.start, &w.probe.before)
	}
	return w
}

// runContext returns the context the owners of the window's run work
// under. It ends once the window's end has passed and etcd's load has been
// scraped there, so that what owners do as they stop (a waiter withdrawing
// its key) is never counted in the window; a counted run's ends at its
// safety deadline.
func (w *window) runContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if w.counted {
		return context.WithDeadline(ctx, w.deadline)
	}
	runCtx, stop := context.WithCancel(ctx)
	go func() {
		ctxtime.Sleep(runCtx, time.Until(w.deadline))
		w.probeWG.Wait()
		stop()
	}()
	return runCtx, stop
}

// since is t as an offset from the window's start (holdLog's clock).
func (w *window) since(t time.Time) int64 { return int64(t.Sub(w.start)) }

// end waits until the load has been scraped at the window's end (a
// counted run's end is now).
func (w *window) end(ctx context.Context) {
	if w.counted && w.probe != nil {
		w.probe.at(ctx, time.Now(), &w.probe.after)
	}
	w.probeWG.Wait()
}

// load is the store's load per acquisition between the two scrapes,
// counting the acquisitions with count; nil when the load was not measured.
func (w *window) load(count func(from, to time.Time) int) (*load, error) {
	if w.probe == nil {
		return nil, nil
	}
	if w.probe.err != nil {
		return nil, w.probe.err
	}
	return w.probe.mt.load(w.probe.before, w.probe.after, count(w.probe.before.at, w.probe.after.at)), nil
}

// waits records the acquisitions of a run whose figure is the wait per
// acquisition (rwlocks, semaphores, one uncontended owner): every
// acquisition's time, for etcd's load, and in the window its wait, into s.
// acquired is safe for concurrent use.
type waits struct {
	w  *window
	s  *side
	mu sync.Mutex
	at []time.Time // every acquisition, in or out of the window
}

// acquired records an acquisition that began at t0 and held at t1.
func (r *waits) acquired(t0, t1 time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, t1)
	if !t1.Before(r.w.from) && t1.Before(r.w.deadline) {
		r.s.Count++
		r.s.waits = append(r.s.waits, t1.Sub(t0))
	}
}

// close ends the window and completes s, measured over length: its rate,
// wait summary, errors and etcd's load per acquisition.
func (r *waits) close(ctx context.Context, length time.Duration, errs *errCount) error {
	r.w.end(ctx)
	r.s.Window = length
	r.s.rate()
	r.s.Wait = summarize(r.s.waits)
	errs.into(r.s)
	var err error
	r.s.Load, err = r.w.load(countBetween(r.at))
	return err
}

// loadProbe scrapes the side's meter at the start and end of the measured
// window; acquisitions between the two scrapes are the divisor.
type loadProbe struct {
	mt            *meter
	before, after snapshot
	err           error
}

// newLoadProbe returns a probe of mt, or nil when mt is nil or cannot
// measure (an external etcd without -metrics): the load is then not
// measured and reported as n/a, never as zero.
func newLoadProbe(mt *meter) *loadProbe {
	if mt == nil || !mt.measured() {
		return nil
	}
	return &loadProbe{mt: mt}
}

// at scrapes into dst at time t.
func (p *loadProbe) at(ctx context.Context, t time.Time, dst *snapshot) {
	if d := time.Until(t); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
	s, err := p.mt.scrape(ctx)
	if err != nil {
		p.err = err
		return
	}
	*dst = s
}

// owners are n handles of one kind, each made as a separate process would
// make it: with its own client connection (and so its own session).
type owners[T any] struct {
	hs     []T
	opened []bool
	clis   []*clientv3.Client
	closer func(T) error
}

// openOwners opens n owners of the implementation named name on st with
// open, at most 16 at a time, each given a client of its own on etcd (nil
// on other stores: the owner dials its own); on an error it closes the ones
// it opened.
func openOwners[T any](e *env, st store, n int, name string, open func(*clientv3.Client) (T, error), closer func(T) error) (*owners[T], error) {
	o := &owners[T]{hs: make([]T, n), opened: make([]bool, n), clis: make([]*clientv3.Client, n), closer: closer}
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			if st == onEtcd {
				cli, err := e.newClient()
				if err != nil {
					return err
				}
				o.clis[i] = cli
			}
			h, err := open(o.clis[i])
			if err != nil {
				return fmt.Errorf("%s: open: %w", name, err)
			}
			o.hs[i], o.opened[i] = h, true
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

// close closes every owner (releasing its lease), then its client.
func (o *owners[T]) close() {
	var g errgroup.Group
	g.SetLimit(16)
	for i := range o.hs {
		g.Go(func() error {
			if o.opened[i] {
				_ = o.closer(o.hs[i])
			}
			if o.clis[i] != nil {
				_ = o.clis[i].Close()
			}
			return nil
		})
	}
	_ = g.Wait()
}

// errOwnerDone, returned by a contend body, ends that owner's loop.
var errOwnerDone = errors.New("owner done")

// contend runs body for each of n owners on its own goroutine, again and
// again until ctx ends, and waits for them all. A body error while ctx lives
// is counted and followed by a short pause, so that an etcd hiccup does not
// become a busy loop; errOwnerDone ends that owner's loop.
func contend(ctx context.Context, n int, errs *errCount, body func(ctx context.Context, i int) error) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := body(ctx, i)
				switch {
				case errors.Is(err, errOwnerDone):
					return
				case err != nil && ctx.Err() == nil:
					errs.add(err)
					time.Sleep(10 * time.Millisecond) // back off, not synchronisation
				}
			}
		})
	}
	wg.Wait()
}
