package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// An election at fleet scale: many candidates, a few per session (as a
// fleet's processes each run several campaigns on one connection), and a
// failover at a time: the leader resigns and campaigns again, and the next
// candidate's Campaign returns. The same at small scale (one candidate per
// session) is the yardstick.
const (
	fleetCandidates = 1000
	fleetSessions   = 100
	fleetSmall      = 8 // candidates, one per session
	fleetRounds     = 100
)

// fleetCfg is a fleet scenario's size (zero: the constants above).
type fleetCfg struct{ candidates, sessions, small, rounds int }

func (r *runner) fleetCfg() fleetCfg {
	if r.fleet == (fleetCfg{}) {
		return fleetCfg{fleetCandidates, fleetSessions, fleetSmall, fleetRounds}
	}
	return r.fleet
}

// Goals from the issue, judged at fleet scale.
const (
	// A failover wakes O(1) candidates: at most this many wakeups (watch
	// events or wake messages a session acted on) per failover.
	fleetWakeupsGoal = 3.0
	// It costs the store O(1) requests: at most this many times the small
	// election's requests per failover.
	fleetRequestsGoal = 1.5
	// Failover p50 at most this many times the small election's.
	fleetP50Goal = 2.0
	// Observers: at most this many deliveries per failover per observing
	// session (one Observe per session: a failover changes the leader
	// once).
	fleetObserverGoal = 1.5
)

// fleetLib opens one session of an election fleet on its store, and
// candidates on it.
type fleetLib struct {
	name  string
	store store
	// session opens a session (its own connection) reporting to mt; open
	// makes a candidate on it, close ends it.
	session func(e *env, mt *meter) (open func(prefix string) (election.Service, error), close func(), err error)
	// queued opens a counter of the candidates' keys of the election on
	// prefix, on a connection of its own that close ends.
	queued func(e *env, prefix string) (count func(context.Context) (int, error), close func(), err error)
}

var etcdFleet = fleetLib{name: "disco", store: onEtcd, session: func(e *env, mt *meter) (func(string) (election.Service, error), func(), error) {
	cli, err := e.newClient()
	if err != nil {
		return nil, nil, err
	}
	s, err := etcdio.NewSession(cli, etcdio.WithTTL(electionTTL), etcdio.WithMetrics(mt.m))
	if err != nil {
		_ = cli.Close()
		return nil, nil, err
	}
	return func(prefix string) (election.Service, error) {
			return etcdio.NewElection(cli, prefix, etcdio.WithSession(s))
		},
		func() { _ = s.Close(); _ = cli.Close() }, nil
}, queued: func(e *env, prefix string) (func(context.Context) (int, error), func(), error) {
	cli, err := e.newClient()
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context) (int, error) {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return 0, err
		}
		return int(resp.Count), nil
	}, func() { _ = cli.Close() }, nil
}}

var zkFleet = fleetLib{name: "disco-zk", store: onZK, session: func(e *env, mt *meter) (func(string) (election.Service, error), func(), error) {
	s, err := zkio.NewSession(mt.zkServers(), zkio.WithTTL(electionTTL), zkio.WithMetrics(mt.m))
	if err != nil {
		return nil, nil, err
	}
	return func(prefix string) (election.Service, error) {
			return zkio.NewElection(nil, prefix, zkio.WithSession(s))
		},
		func() { _ = s.Close() }, nil
}, queued: func(e *env, prefix string) (func(context.Context) (int, error), func(), error) {
	conn, err := zkConnect([]string{e.zkAddr}, nil)
	if err != nil {
		return nil, nil, err
	}
	return func(context.Context) (int, error) {
		kids, _, err := conn.Children(prefix)
		if errors.Is(err, zk.ErrNoNode) {
			return 0, nil
		}
		return len(kids), err
	}, conn.Close, nil
}}

var redisFleet = fleetLib{name: "disco-redis", store: onRedis, session: func(e *env, mt *meter) (func(string) (election.Service, error), func(), error) {
	cli := mt.redisClient()
	s, err := redisio.NewSession(cli, redisio.WithTTL(electionTTL), redisio.WithMetrics(mt.m))
	if err != nil {
		return nil, nil, err
	}
	return func(prefix string) (election.Service, error) {
			return redisio.NewElection(cli, prefix, redisio.WithSession(s))
		},
		func() { _ = s.Close() }, nil
}, queued: func(e *env, prefix string) (func(context.Context) (int, error), func(), error) {
	cli := redis.NewClient(&redis.Options{Addr: e.redisAddr})
	return func(ctx context.Context) (int, error) {
		n, err := cli.ZCard(ctx, prefix+"/queue").Result() // the name's queue (see redisio's Keys)
		return int(n), err
	}, func() { _ = cli.Close() }, nil
}}

// fleet is an election fleet open across the slices it is measured in:
// its sessions, its candidates (all campaigning, one Observe per session
// if observed) and the leader's term. Each slice is rounds failovers.
type fleet struct {
	lib    fleetLib
	mt     *meter
	rounds int
	fp     *footprint

	cands    []election.Service
	closes   []func()
	won      chan fleetTerm
	campaign func(i int)
	leader   fleetTerm
	stop     func()       // ends the campaigns and the observers, and waits for the observers
	observed atomic.Int64 // deliveries to the observers
	// Campaigns that returned an error before the fleet was stopped, and
	// the first such error: said beside a wait that then runs out.
	failed      atomic.Int64
	firstFailed atomic.Pointer[error]
}

// failures says how many Campaigns failed and the first error, or "" if
// none did.
func (f *fleet) failures() string {
	p := f.firstFailed.Load()
	if p == nil {
		return ""
	}
	return fmt.Sprintf(" (%d Campaigns failed, the first: %v)", f.failed.Load(), *p)
}

// fleetTerm is a Campaign's return: the candidate, when, and how long its
// Campaign call took.
type fleetTerm struct {
	i      int
	at     time.Time
	waited time.Duration
}

// openFleet opens sessions, and candidates spread over them, all
// campaigning (with observe, and one Observe per session), and returns
// once every campaign landed and the sessions took in what it set off,
// its footprint measured.
func openFleet(ctx context.Context, e *env, lib fleetLib, candidates, sessions, rounds int, observe bool) (_ *fleet, err error) {
	prefix := e.prefix(fmt.Sprintf("fleet%d-%s", candidates, lib.name))
	f := &fleet{lib: lib, mt: newMeter(e, lib.store), rounds: rounds, stop: func() {}}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	f.mt.sessions = sessions
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()

	opens := make([]func(string) (election.Service, error), sessions)
	f.closes = make([]func(), sessions)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range sessions {
		g.Go(func() error {
			var err error
			opens[i], f.closes[i], err = lib.session(e, f.mt)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	f.cands = make([]election.Service, candidates)
	for i := range f.cands {
		g.Go(func() error {
			var err error
			f.cands[i], err = opens[i%sessions](prefix)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}

	// One observer per session, counting deliveries.
	octx, ostop := context.WithCancel(ctx)
	var delivered sync.WaitGroup
	for i := range sessions {
		if !observe {
			break
		}
		ch := f.cands[i].Observe(octx)
		delivered.Go(func() {
			for range ch {
				f.observed.Add(1)
			}
		})
	}
	// Everyone campaigns; each Campaign's return is a term, reported on won.
	f.won = make(chan fleetTerm, candidates)
	cctx, cstop := context.WithCancel(ctx)
	f.stop = func() { cstop(); ostop(); delivered.Wait() }
	f.campaign = func(i int) {
		go func() {
			called := time.Now()
			err := f.cands[i].Campaign(cctx, fmt.Sprintf("candidate-%d", i))
			switch {
			case err == nil:
				now := time.Now()
				f.won <- fleetTerm{i, now, now.Sub(called)}
			case cctx.Err() == nil:
				f.failed.Add(1)
				f.firstFailed.CompareAndSwap(nil, &err)
			}
		}()
	}
	for i := range f.cands {
		f.campaign(i)
	}
	select {
	case f.leader = <-f.won:
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("no leader within a minute of the campaigns%s", f.failures())
	}
	// Let every campaign land, and the sessions take in what it set off,
	// before measuring memory and failovers.
	if err := waitQueued(ctx, lib, e, prefix, candidates); err != nil {
		return nil, fmt.Errorf("%w%s", err, f.failures())
	}
	if err := settleWakeups(ctx, f.mt); err != nil {
		return nil, err
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	f.fp = &footprint{Waiters: candidates, Sessions: sessions, Clients: sessions, Embedded: lib.store == onEtcd && !e.external,
		Goroutines: float64(runtime.NumGoroutine()-goroutinesBefore) / float64(candidates),
		HeapBytes:  float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(candidates)}
	return f, nil
}

// close ends the campaigns and the observers, and closes the candidates
// and the sessions.
func (f *fleet) close() {
	f.stop()
	for _, c := range f.cands {
		if c != nil {
			_ = c.Close()
		}
	}
	for _, c := range f.closes {
		if c != nil {
			c()
		}
	}
	f.mt.close()
}

// slice measures f.rounds failovers: the leader resigns and campaigns
// again, until the next candidate's Campaign returns.
func (f *fleet) slice(ctx context.Context, _ runCfg) (*side, error) {
	snapBefore, err := f.mt.scrape(ctx)
	if err != nil {
		return nil, err
	}
	var failovers, waits []time.Duration
	began := time.Now()
	for range f.rounds {
		start := time.Now()
		if err := f.cands[f.leader.i].Resign(ctx); err != nil {
			return nil, fmt.Errorf("resign: %w", err)
		}
		f.campaign(f.leader.i)
		select {
		case next := <-f.won:
			failovers = append(failovers, next.at.Sub(start))
			waits = append(waits, next.waited)
			f.leader = next
		case <-time.After(time.Minute):
			return nil, fmt.Errorf("no new leader within a minute of a Resign%s", f.failures())
		}
	}
	snapAfter, err := f.mt.scrape(ctx)
	if err != nil {
		return nil, err
	}
	s := &side{Lib: f.lib.name, Count: len(failovers), Window: time.Since(began), handoffs: failovers, waits: waits, Footprint: f.fp}
	s.Handoff, s.Wait = summarize(failovers), summarize(waits)
	s.rate()
	s.Load = f.mt.load(snapBefore, snapAfter, len(failovers))
	return s, nil
}

// waitQueued returns once every candidate's key is in the store (count
// reports how many there are), so that the failovers measured are those of
// a full queue.
func waitQueued(ctx context.Context, lib fleetLib, e *env, prefix string, candidates int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	count, closeCount, err := lib.queued(e, prefix)
	if err != nil {
		return fmt.Errorf("count the candidates' keys: %w", err)
	}
	defer closeCount()
	for {
		n, err := count(ctx)
		if err != nil {
			return fmt.Errorf("count the candidates' keys: %w", err)
		}
		if n >= candidates {
			return nil
		}
		if !ctxtime.Sleep(ctx, 20*time.Millisecond) {
			return fmt.Errorf("%d of %d candidates' keys in the store: %w", n, candidates, ctx.Err())
		}
	}
}

// settleWakeups returns once the side's sessions have acted on no watch
// event or wake message for a while: a thousand campaigns send every
// session (and, through its watch, every candidate on it) a thousand
// events, which must not count against the failovers that follow.
func settleWakeups(ctx context.Context, mt *meter) error {
	const quiet, limit = 300 * time.Millisecond, time.Minute
	deadline := time.Now().Add(limit)
	last := -1.0
	for {
		snap, err := mt.scrape(ctx)
		if err != nil {
			return err
		}
		n := snap.series[wakeupsSeries]
		if n == last {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the candidates' sessions still acting on events %v after the last campaign", limit)
		}
		last = n
		if !ctxtime.Sleep(ctx, quiet) {
			return ctx.Err()
		}
	}
}

// fleetScenario: lib's election at fleetCandidates over fleetSessions
// interleaved with one at fleetSmall candidates (one per session), in
// pairs of slices of fc.rounds failovers each, then the large one again
// with one Observe per session, judged on the fleet goals. The
// heap and goroutines per candidate are the sides' footprints.
func fleetScenario(lib fleetLib) func(ctx context.Context, r *runner) (*result, error) {
	return func(ctx context.Context, r *runner) (*result, error) {
		if err := r.env.start(lib.store); err != nil {
			return nil, err
		}
		fc, pc := r.fleetCfg(), r.pairCfg()
		r.logf("  election fleet on %s: %d candidates over %d sessions and %d, %d interleaved pairs of %d failovers ...",
			lib.store, fc.candidates, fc.sessions, fc.small, pc.pairs, fc.rounds)
		open := func(candidates, sessions int) func() (slicer, error) {
			return func() (slicer, error) {
				return openFleet(ctx, r.env, lib, candidates, sessions, fc.rounds, false)
			}
		}
		iv, err := interleave(ctx, pc, open(fc.candidates, fc.sessions), open(fc.small, fc.small))
		if err != nil {
			return nil, fmt.Errorf("fleets of %d and %d: %w", fc.candidates, fc.small, err)
		}
		r.logf("  election fleet on %s: %d candidates, one observer per session, %d failovers ...", lib.store, fc.candidates, fc.rounds)
		observed, err := openFleet(ctx, r.env, lib, fc.candidates, fc.sessions, fc.rounds, true)
		if err != nil {
			return nil, fmt.Errorf("fleet of %d, observed: %w", fc.candidates, err)
		}
		deliveredBefore := observed.observed.Load()
		obs, err := observed.slice(ctx, runCfg{})
		deliveries := observed.observed.Load() - deliveredBefore
		observed.close()
		if err != nil {
			return nil, fmt.Errorf("fleet of %d, observed: %w", fc.candidates, err)
		}
		perSession := float64(deliveries) / float64(obs.Count) / float64(fc.sessions)

		d, b := iv.pooled[discoSide], iv.pooled[baseSide]
		b.Lib = fmt.Sprintf("%s@%d", lib.name, fc.small)
		name := fleetName(lib.store)
		p50s := figureOf(iv.perPair(discoSide, baseSide, func(a, b *side) (float64, bool) {
			return a.Handoff.P50 / b.Handoff.P50, a.Handoff.N > 0 && b.Handoff.N > 0 && b.Handoff.P50 > 0
		}))
		rw := &row{Scenario: name, Contenders: fc.candidates, Baseline: b.Lib, Unit: "failovers/s", Latency: "failover", Disco: d, Base: b,
			VsBasePaired: figureOf(iv.perPair(discoSide, baseSide, rateRatio)), P50VsBasePaired: p50s}
		wake := func(s *side) float64 {
			if s.Load == nil || s.Load.Wakeups == nil {
				return 0
			}
			return *s.Load.Wakeups
		}
		req := func(s *side) float64 {
			if s.Load == nil {
				return 0
			}
			return s.Load.Requests
		}
		rw.Goals = []goal{
			judge(fmt.Sprintf("election fleet: wakeups/failover at %d <= %g", fc.candidates, fleetWakeupsGoal),
				wake(d) <= fleetWakeupsGoal, fmt.Sprintf("%.1f at %d, %.1f at %d", wake(d), fc.candidates, wake(b), fc.small)),
			judge(fmt.Sprintf("election fleet: requests/failover at %d <= %gx at %d", fc.candidates, fleetRequestsGoal, fc.small),
				req(b) > 0 && req(d) <= fleetRequestsGoal*req(b), fmt.Sprintf("%.1f vs %.1f", req(d), req(b))),
			judgeFigure(fmt.Sprintf("election fleet: failover p50 at %d <= %gx at %d", fc.candidates, fleetP50Goal, fc.small), p50s, false, fleetP50Goal, "x",
				fmt.Sprintf("; per pair, p50 of %d failovers over p50 of %d; pooled %.2f vs %.2f ms", fc.rounds, fc.rounds, d.Handoff.P50, b.Handoff.P50)),
			judge(fmt.Sprintf("election fleet: observer deliveries/failover per session <= %g", fleetObserverGoal),
				perSession <= fleetObserverGoal, fmt.Sprintf("%.2f, with %.1f wakeups/failover in all (%.1f without observers)",
					perSession, wake(obs), wake(d))),
		}
		return &result{Scenario: name, Rows: []*row{rw},
			chart: chart{title: fmt.Sprintf("Election on %s, %d candidates over %d sessions and %d: failover, CDF", lib.store, fc.candidates, fc.sessions, fc.small),
				xLabel: "failover (ms)", cdfs: []series{{d.Lib + " failover", d.handoffs}, {b.Lib + " failover", b.handoffs}}},
		}, nil
	}
}

// fleetName is the fleet scenario's name on st.
func fleetName(st store) string {
	if st == onEtcd {
		return fmt.Sprintf("election-fleet-%d", fleetCandidates)
	}
	return fmt.Sprintf("%s-election-fleet-%d", st, fleetCandidates)
}
