package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
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
	fleetRounds     = 20
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
	conn, _, err := zk.Connect([]string{e.zkAddr}, zkTimeout, zk.WithLogger(zkQuiet{}))
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

// fleetFigures is one size's outcome: its side (with the candidates'
// footprint once every one campaigns) and, per failover, the deliveries to
// the observers (one Observe per session), per observing session.
type fleetFigures struct {
	side               *side
	observerDeliveries float64
}

// runFleet opens sessions, and candidates spread over them, all
// campaigning (with observe, and one Observe per session), and measures
// rounds failovers.
func runFleet(ctx context.Context, e *env, lib fleetLib, candidates, sessions, rounds int, observe bool) (*fleetFigures, error) {
	prefix := e.prefix(fmt.Sprintf("fleet%d-%s", candidates, lib.name))
	mt := newMeter(e, lib.store)
	defer mt.close()
	mt.sessions = sessions
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutinesBefore := runtime.NumGoroutine()

	opens := make([]func(string) (election.Service, error), sessions)
	closes := make([]func(), sessions)
	defer func() {
		for _, c := range closes {
			if c != nil {
				c()
			}
		}
	}()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range sessions {
		g.Go(func() error {
			var err error
			opens[i], closes[i], err = lib.session(e, mt)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	cands := make([]election.Service, candidates)
	for i := range cands {
		g.Go(func() error {
			var err error
			cands[i], err = opens[i%sessions](prefix)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range cands {
			if c != nil {
				_ = c.Close()
			}
		}
	}()

	// One observer per session, counting deliveries.
	octx, ostop := context.WithCancel(ctx)
	defer ostop()
	var delivered sync.WaitGroup
	var obsMu sync.Mutex
	observed := 0
	for i := range sessions {
		if !observe {
			break
		}
		ch := cands[i].Observe(octx)
		delivered.Go(func() {
			for range ch {
				obsMu.Lock()
				observed++
				obsMu.Unlock()
			}
		})
	}
	defer func() { ostop(); delivered.Wait() }()

	// Everyone campaigns; each Campaign's return is a term, reported on won.
	type term struct {
		i      int
		at     time.Time
		waited time.Duration // its Campaign call's
	}
	won := make(chan term, candidates)
	cctx, cstop := context.WithCancel(ctx)
	defer cstop()
	campaign := func(i int) {
		go func() {
			called := time.Now()
			if err := cands[i].Campaign(cctx, fmt.Sprintf("candidate-%d", i)); err == nil {
				now := time.Now()
				won <- term{i, now, now.Sub(called)}
			}
		}()
	}
	for i := range cands {
		campaign(i)
	}
	var leader term
	select {
	case leader = <-won:
	case <-time.After(time.Minute):
		return nil, errors.New("no leader within a minute of the campaigns")
	}
	// Let every campaign land, and the sessions take in what it set off,
	// before measuring memory and failovers.
	if err := waitQueued(ctx, lib, e, prefix, candidates); err != nil {
		return nil, err
	}
	if err := settleWakeups(ctx, mt); err != nil {
		return nil, err
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	fp := &footprint{Waiters: candidates, Sessions: sessions, Clients: sessions, Embedded: lib.store == onEtcd && !e.external,
		Goroutines: float64(runtime.NumGoroutine()-goroutinesBefore) / float64(candidates),
		HeapBytes:  float64(int64(after.HeapInuse)-int64(before.HeapInuse)) / float64(candidates)}

	obsMu.Lock()
	observedBefore := observed
	obsMu.Unlock()
	snapBefore, err := mt.scrape(ctx)
	if err != nil {
		return nil, err
	}
	var failovers, waits []time.Duration
	began := time.Now()
	for range rounds {
		start := time.Now()
		if err := cands[leader.i].Resign(ctx); err != nil {
			return nil, fmt.Errorf("resign: %w", err)
		}
		campaign(leader.i)
		select {
		case next := <-won:
			failovers = append(failovers, next.at.Sub(start))
			waits = append(waits, next.waited)
			leader = next
		case <-time.After(time.Minute):
			return nil, errors.New("no new leader within a minute of a Resign")
		}
	}
	snapAfter, err := mt.scrape(ctx)
	if err != nil {
		return nil, err
	}
	obsMu.Lock()
	deliveries := observed - observedBefore
	obsMu.Unlock()

	s := &side{Lib: lib.name, Count: len(failovers), Window: time.Since(began), handoffs: failovers, waits: waits, Footprint: fp}
	s.Handoff, s.Wait = summarize(failovers), summarize(waits)
	s.rate()
	s.Load = mt.load(snapBefore, snapAfter, len(failovers))
	return &fleetFigures{side: s, observerDeliveries: float64(deliveries) / float64(len(failovers)) / float64(sessions)}, nil
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

// fleetScenario: lib's election at fleetSmall candidates (one per
// session), then at fleetCandidates over fleetSessions, judged on the
// issue's fleet goals. The heap and goroutines per candidate are the
// sides' footprints.
func fleetScenario(lib fleetLib) func(ctx context.Context, r *runner) (*result, error) {
	return func(ctx context.Context, r *runner) (*result, error) {
		if err := r.env.start(lib.store); err != nil {
			return nil, err
		}
		fc := r.fleetCfg()
		r.logf("  election fleet on %s: %d candidates, %d failovers ...", lib.store, fc.small, fc.rounds)
		small, err := runFleet(ctx, r.env, lib, fc.small, fc.small, fc.rounds, false)
		if err != nil {
			return nil, fmt.Errorf("fleet of %d: %w", fc.small, err)
		}
		r.logf("  election fleet on %s: %d candidates over %d sessions, %d failovers ...", lib.store, fc.candidates, fc.sessions, fc.rounds)
		big, err := runFleet(ctx, r.env, lib, fc.candidates, fc.sessions, fc.rounds, false)
		if err != nil {
			return nil, fmt.Errorf("fleet of %d: %w", fc.candidates, err)
		}
		r.logf("  election fleet on %s: the same, one observer per session ...", lib.store)
		observed, err := runFleet(ctx, r.env, lib, fc.candidates, fc.sessions, fc.rounds, true)
		if err != nil {
			return nil, fmt.Errorf("fleet of %d, observed: %w", fc.candidates, err)
		}
		d, b := big.side, small.side
		b.Lib = fmt.Sprintf("%s@%d", lib.name, fc.small)
		name := fleetName(lib.store)
		rw := &row{Scenario: name, Contenders: fc.candidates, Baseline: b.Lib, Unit: "failovers/s", Latency: "failover", Disco: d, Base: b}
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
			judge(fmt.Sprintf("election fleet: failover p50 at %d <= %gx at %d", fc.candidates, fleetP50Goal, fc.small),
				d.Handoff.N > 0 && b.Handoff.N > 0 && d.Handoff.P50 <= fleetP50Goal*b.Handoff.P50,
				fmt.Sprintf("%.2f vs %.2f ms (%d failovers each, measured once)", d.Handoff.P50, b.Handoff.P50, fc.rounds)),
			judge(fmt.Sprintf("election fleet: observer deliveries/failover per session <= %g", fleetObserverGoal),
				observed.observerDeliveries <= fleetObserverGoal, fmt.Sprintf("%.2f, with %.1f wakeups/failover in all (%.1f without observers)",
					observed.observerDeliveries, wake(observed.side), wake(d))),
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
