package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/ctxtime"
)

// runCfg says how long one side of a scenario runs.
type runCfg struct {
	warmup   time.Duration // runs but is not recorded
	duration time.Duration // the measured window
	maxAcq   int           // > 0: stop after this many acquisitions (benchmarks), no warmup

	// Benchmarks only: called when the owners are ready and when they have
	// stopped, to keep setup and teardown out of the timing.
	ready, finished func()
}

// dist summarises latencies, in milliseconds.
type dist struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// summarize sorts samples in place and summarises them.
func summarize(samples []time.Duration) dist {
	if len(samples) == 0 {
		return dist{}
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(samples)))) - 1
		return ms(samples[max(i, 0)])
	}
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	return dist{N: len(samples), Mean: ms(sum / time.Duration(len(samples))),
		P50: q(0.50), P90: q(0.90), P99: q(0.99), P999: q(0.999), Max: ms(samples[len(samples)-1])}
}

// side is what one implementation did in one scenario.
type side struct {
	Lib      string        `json:"lib"`
	Count    int           `json:"count"` // acquisitions (or operations) in the window
	Window   time.Duration `json:"window_ns"`
	PerSec   float64       `json:"per_sec"`
	Handoff  dist          `json:"handoff"`             // previous holder calls Unlock -> next Lock returns
	HandoffR dist          `json:"handoff_from_return"` // previous holder's Unlock returns -> next Lock returns (clamped at 0)
	Wait     dist          `json:"wait"`                // one Lock call
	Cycle    dist          `json:"cycle"`               // Lock+Unlock, uncontended
	Rejected int           `json:"rejected,omitempty"`  // guard: stale tokens refused (expected)
	Errors   int           `json:"errors"`
	FirstErr string        `json:"first_error,omitempty"`
	Load     *load         `json:"load,omitempty"` // nil: not measured (no metrics endpoint)
	// Elections, expiry: how long closing a candidate took after its
	// client had been closed under it (it must not wait for etcd).
	VanishedClose *dist `json:"vanished_close,omitempty"`

	// Raw samples, for plots.
	handoffs, waits, cycles []time.Duration
}

func (s *side) rate() {
	if s.Window > 0 {
		s.PerSec = float64(s.Count) / s.Window.Seconds()
	}
}

// errCount collects errors from many goroutines.
type errCount struct {
	mu    sync.Mutex
	n     int
	first error
}

func (e *errCount) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.first == nil {
		e.first = err
	}
}

func (e *errCount) into(s *side) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s.Errors = e.n
	if e.first != nil {
		s.FirstErr = e.first.Error()
	}
}

// hold is one acquisition, in nanoseconds since the run's start on the
// monotonic clock. Holds are appended in acquisition order: each is appended
// by its holder while it holds the lock.
type hold struct {
	lockCalled, acquired int64
	releaseCalled        int64 // set before Unlock is called
	released             int64 // set after Unlock returns; 0 if it failed
	token                int64
}

// holdLog is the shared memory the in-process contenders record into.
type holdLog struct {
	start time.Time
	mu    sync.Mutex
	holds []hold
}

func (h *holdLog) now() int64 { return int64(time.Since(h.start)) }

func (h *holdLog) acquired(lockCalled, acquired, token int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds = append(h.holds, hold{lockCalled: lockCalled, acquired: acquired, token: token})
	return len(h.holds) - 1
}

func (h *holdLog) setReleaseCalled(i int, t int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds[i].releaseCalled = t
}

func (h *holdLog) setReleased(i int, t int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds[i].released = t
}

// analyze fills s from the holds acquired in [from, to) and checks that they
// never overlapped and that their tokens only rose.
func (h *holdLog) analyze(s *side, from, to int64, errs *errCount) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var fromReturn []time.Duration
	for i, cur := range h.holds {
		if i > 0 {
			prev := h.holds[i-1]
			if prev.releaseCalled == 0 || cur.acquired < prev.releaseCalled {
				errs.add(fmt.Errorf("mutual exclusion violated: hold %d acquired %v before hold %d released",
					i, time.Duration(cur.acquired), i-1))
			}
			if cur.token <= prev.token {
				errs.add(fmt.Errorf("fencing token went from %d to %d", prev.token, cur.token))
			}
		}
		if cur.acquired < from || cur.acquired >= to {
			continue
		}
		s.Count++
		s.waits = append(s.waits, time.Duration(cur.acquired-cur.lockCalled))
		if i > 0 {
			prev := h.holds[i-1]
			s.handoffs = append(s.handoffs, time.Duration(cur.acquired-prev.releaseCalled))
			if prev.released > 0 {
				// The next holder may return before the previous holder's
				// Unlock does: that counts as a zero handoff.
				fromReturn = append(fromReturn, time.Duration(max(0, cur.acquired-prev.released)))
			}
		}
	}
	s.Handoff = summarize(s.handoffs)
	s.HandoffR = summarize(fromReturn)
	s.Wait = summarize(s.waits)
	s.Window = time.Duration(to - from)
	s.rate()
}

// openLockers makes n owners on prefix, each with its own client.
func openLockers(ctx context.Context, e *env, lib lockLib, prefix string, n int) ([]locker, []*clientv3.Client, error) {
	ls := make([]locker, n)
	clis := make([]*clientv3.Client, n)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			cli, err := e.newClient()
			if err != nil {
				return err
			}
			clis[i] = cli
			l, err := lib.open(cli, prefix)
			if err != nil {
				return fmt.Errorf("%s: open: %w", lib.name, err)
			}
			ls[i] = l
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		closeLockers(ls, clis)
		return nil, nil, err
	}
	return ls, clis, nil
}

// closeLockers closes every owner (releasing its lease) and then its client.
func closeLockers(ls []locker, clis []*clientv3.Client) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range ls {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if ls[i] != nil {
				_ = ls[i].close()
			}
			if clis[i] != nil {
				_ = clis[i].Close()
			}
		})
	}
	wg.Wait()
}

// loadProbe scrapes the metrics endpoint at the start and end of the
// measured window; acquisitions between the two scrapes are the divisor.
type loadProbe struct {
	url           string
	before, after snapshot
	err           error
}

// newLoadProbe returns a probe of url, or nil when there is no metrics
// endpoint (an external etcd without -metrics): the load is then not
// measured and reported as n/a, never as zero.
func newLoadProbe(url string) *loadProbe {
	if url == "" {
		return nil
	}
	return &loadProbe{url: url}
}

func (p *loadProbe) at(ctx context.Context, t time.Time, dst *snapshot) {
	if p == nil || p.url == "" {
		return
	}
	if d := time.Until(t); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return
		}
	}
	s, err := scrape(ctx, p.url)
	if err != nil {
		p.err = err
		return
	}
	*dst = s
}

// runContended runs n owners, each in its own client and session, that loop
// Lock -> check the token with a guard (the tiny critical section) -> Unlock
// on one lock, and measures handoffs and waits from the shared hold log.
func runContended(ctx context.Context, e *env, lib lockLib, n int, cfg runCfg) (*side, error) {
	prefix := e.prefix(fmt.Sprintf("contended%d-%s", n, lib.name))
	ls, clis, err := openLockers(ctx, e, lib, prefix, n)
	if err != nil {
		return nil, err
	}
	defer closeLockers(ls, clis)

	s := &side{Lib: lib.name}
	var errs errCount
	g := guard.New()
	if cfg.ready != nil {
		cfg.ready()
	}
	log := &holdLog{start: time.Now()}
	measureFrom := log.start.Add(cfg.warmup)
	deadline := measureFrom.Add(cfg.duration)
	if cfg.maxAcq > 0 {
		measureFrom, deadline = log.start, log.start.Add(time.Hour)
	}
	runCtx, stop := context.WithDeadline(ctx, deadline)
	defer stop()

	probe := newLoadProbe(e.metricsURL)
	if cfg.maxAcq > 0 {
		probe = nil
	}
	var probeWG sync.WaitGroup
	if probe != nil {
		probeWG.Go(func() {
			probe.at(ctx, measureFrom, &probe.before)
			probe.at(ctx, deadline, &probe.after)
		})
	}

	var total atomic.Int64
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for runCtx.Err() == nil {
				called := log.now()
				tok, err := l.lock(runCtx)
				if err != nil {
					if runCtx.Err() == nil {
						errs.add(fmt.Errorf("lock: %w", err))
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				i := log.acquired(called, log.now(), tok)
				// The critical section: what a holder does with its token
				// before touching the protected resource.
				if err := g.Check(fencing.Token(tok)); err != nil {
					errs.add(err)
				}
				log.setReleaseCalled(i, log.now())
				uctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), 10*time.Second)
				err = l.unlock(uctx)
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("unlock: %w", err))
				} else {
					log.setReleased(i, log.now())
				}
				if cfg.maxAcq > 0 && total.Add(1) >= int64(cfg.maxAcq) {
					stop()
				}
			}
		})
	}
	wg.Wait()
	if cfg.finished != nil {
		cfg.finished()
	}
	probeWG.Wait()

	to := int64(deadline.Sub(log.start))
	if cfg.maxAcq > 0 {
		log.mu.Lock()
		to = log.holds[len(log.holds)-1].acquired + 1
		log.mu.Unlock()
	}
	log.analyze(s, int64(measureFrom.Sub(log.start)), to, &errs)
	errs.into(s)
	if probe != nil {
		if probe.err != nil {
			return nil, probe.err
		}
		s.Load = loadBetween(probe.before, probe.after,
			log.count(int64(probe.before.at.Sub(log.start)), int64(probe.after.at.Sub(log.start))))
	}
	return s, nil
}

// count returns how many holds were acquired in [from, to).
func (h *holdLog) count(from, to int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, x := range h.holds {
		if x.acquired >= from && x.acquired < to {
			n++
		}
	}
	return n
}

// runUncontended loops Lock -> Unlock with a single owner and measures the
// whole cycle and the Lock alone.
func runUncontended(ctx context.Context, e *env, lib lockLib, cfg runCfg) (*side, error) {
	ls, clis, err := openLockers(ctx, e, lib, e.prefix("uncontended-"+lib.name), 1)
	if err != nil {
		return nil, err
	}
	defer closeLockers(ls, clis)
	l := ls[0]
	s := &side{Lib: lib.name}
	var errs errCount
	start := time.Now()
	measureFrom := start.Add(cfg.warmup)
	deadline := measureFrom.Add(cfg.duration)
	probe := newLoadProbe(e.metricsURL)
	if cfg.maxAcq > 0 {
		measureFrom, deadline, probe = start, start.Add(time.Hour), nil
	}
	var probeWG sync.WaitGroup
	if probe != nil {
		probeWG.Go(func() {
			probe.at(ctx, measureFrom, &probe.before)
			probe.at(ctx, deadline, &probe.after)
		})
	}
	var acquiredAt []time.Time
	for {
		t0 := time.Now()
		if !t0.Before(deadline) || ctx.Err() != nil || cfg.maxAcq > 0 && len(s.cycles) >= cfg.maxAcq {
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
		acquiredAt = append(acquiredAt, t1)
		if !t0.Before(measureFrom) {
			s.waits = append(s.waits, t1.Sub(t0))
			s.cycles = append(s.cycles, t2.Sub(t0))
		}
	}
	end := time.Now()
	probeWG.Wait()
	s.Count = len(s.cycles)
	s.Window = end.Sub(measureFrom)
	s.rate()
	s.Wait = summarize(s.waits)
	s.Cycle = summarize(s.cycles)
	errs.into(s)
	if probe != nil {
		if probe.err != nil {
			return nil, probe.err
		}
		s.Load = loadOver(probe.before, probe.after, acquiredAt)
	}
	return s, nil
}

func guardCheck(g *guard.Guard, t fencing.Token) error { return g.Check(t) }

func guardAdmit(g *guard.Guard, t fencing.Token) error {
	_, done, err := g.Admit(context.Background(), t)
	if err == nil {
		done()
	}
	return err
}

// mutexMark is the naive guard: a high-water mark behind a sync.Mutex.
type mutexMark struct {
	mu   sync.Mutex
	mark fencing.Token
}

func (m *mutexMark) check(t fencing.Token) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t < m.mark {
		return fencing.ErrTokenStale
	}
	m.mark = t
	return nil
}

// raiseEvery is how many operations the first goroutine makes between two
// raises of the token, as if the lock changed hands that often.
const raiseEvery = 100

// runGuard has `goroutines` goroutines call op for cfg.duration. They all
// present the current token; the first one raises it every raiseEvery calls,
// so the others now and then present a stale one (counted as Rejected).
func runGuard(ctx context.Context, name string, goroutines int, op func(fencing.Token) error, cfg runCfg) *side {
	s := &side{Lib: name}
	var errs errCount
	var epoch atomic.Int64
	epoch.Store(1)
	var recording, stopped atomic.Bool
	var count, rejected atomic.Int64
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			var n, rej int64
			for k := 0; ; k++ {
				if k%256 == 0 && stopped.Load() {
					break
				}
				if i == 0 && k%raiseEvery == 0 {
					epoch.Add(1)
				}
				err := op(fencing.Token(epoch.Load()))
				if !recording.Load() {
					continue
				}
				switch {
				case err == nil:
					n++
				case errors.Is(err, fencing.ErrTokenStale):
					rej++
				default:
					errs.add(err)
				}
			}
			count.Add(n)
			rejected.Add(rej)
		})
	}
	ctxtime.Sleep(ctx, cfg.warmup)
	recording.Store(true)
	start := time.Now()
	ctxtime.Sleep(ctx, cfg.duration)
	recording.Store(false)
	s.Window = time.Since(start)
	stopped.Store(true)
	wg.Wait()
	s.Count = int(count.Load() + rejected.Load())
	s.Rejected = int(rejected.Load())
	s.rate()
	errs.into(s)
	return s
}
