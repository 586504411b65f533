package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// scenario is one named measurement. Each runs disco and its baseline(s)
// one after the other on the same etcd and returns rows for the table and
// data for a chart.
//
// Adding a scenario (rwlock, election, ...): write a run function that
// measures each side with the shared runner in run.go (owners, window,
// contend) and the figures in stats.go and holdlog.go, build rows with goals, and append it in allScenarios. Nothing else
// changes: the filter, table, JSON and charts work on any result.
type scenario struct {
	name string
	run  func(ctx context.Context, r *runner) (*result, error)
}

// runner is what every scenario gets.
type runner struct {
	env             *env
	cfg             runCfg
	progress        io.Writer
	contenders      []int
	guardGoroutines int
	// The election-failover-expiry scenario: lease TTL and failovers per
	// side (0: defaultExpiryTTL, defaultExpiryRounds).
	expiryTTL    time.Duration
	expiryRounds int

	// How the lock scenarios interleave the two sides of their ratios
	// (zero: defaultPairCfg).
	pairs pairCfg
	// The election fleet scenarios' size (zero: fleetCandidates, ...).
	fleet fleetCfg

	// Figures measured at most once per run, when a goal first needs them.
	// Scenarios run one after another: no locking.
	serialRead *dist // a waiter-like serializable read Txn (measureSerialRead)
}

// pairCfg is how the lock scenarios interleave their ratios' sides.
func (r *runner) pairCfg() pairCfg {
	if r.pairs == (pairCfg{}) {
		return defaultPairCfg
	}
	return r.pairs
}

func (r *runner) logf(format string, args ...any) {
	if r.progress != nil {
		fmt.Fprintf(r.progress, format+"\n", args...)
	}
}

// result is one scenario's outcome.
type result struct {
	Scenario string        `json:"scenario"`
	Rows     []*row        `json:"rows"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	chart    chart
}

// row is one line of the table: disco against one baseline.
type row struct {
	Scenario   string `json:"scenario"`
	Contenders int    `json:"contenders"`
	Baseline   string `json:"baseline,omitempty"`
	Unit       string `json:"unit"`    // of PerSec: acq/s, ops/s
	Latency    string `json:"latency"` // which latency the table shows: handoff, cycle, or ""
	Disco      *side  `json:"disco"`
	Base       *side  `json:"base,omitempty"`
	Goals      []goal `json:"goals,omitempty"`

	// Lock scenarios on etcd: the floor, one client's uncontended
	// Put+Delete cycles, measured interleaved with Disco (see paired.go),
	// both pooled over their slices; and per pair of slices, Disco's rate
	// over the floor's, Disco's latency p99 (handoff or cycle) over the
	// floor's cycle p99, and Disco's etcd requests and watch events per
	// acquisition.
	Floor *side `json:"floor,omitempty"`
	// Per pair, Disco's rate over Base's, measured interleaved: disco at
	// two contention levels (lock-flatness), disco and etcd's Mutex (the
	// lock scenarios on etcd).
	VsBasePaired *figure `json:"vs_base_paired,omitempty"`
	// Per pair, Disco's latency p50 over Base's (the election fleets:
	// failover p50 at 1,000 candidates over at 8).
	P50VsBasePaired   *figure `json:"p50_vs_base_paired,omitempty"`
	VsFloor           *figure `json:"vs_floor,omitempty"`
	P99VsFloor        *figure `json:"p99_vs_floor,omitempty"`
	RequestsPerAcq    *figure `json:"requests_per_acq,omitempty"`
	WatchEventsPerAcq *figure `json:"watch_events_per_acq,omitempty"`
}

// goal is one target from the issue, judged on this run.
type goal struct {
	Name   string `json:"name"`
	Status string `json:"status"` // met, MISSED, inconclusive, n/a
	Detail string `json:"detail"`
}

func judge(name string, ok bool, detail string) goal {
	st := "MISSED"
	if ok {
		st = "met"
	}
	return goal{Name: name, Status: st, Detail: detail}
}

// Goals from the issue. The ratios to the Put+Delete floor are judged on
// interleaved pairs (judgeFigure); the fsync goals with fsync on, the
// request goals with it off (the machine is then CPU-bound and the cost
// is requests).

// handoffP99VsFloorGoal: disco's handoff p99 at most this many times the
// floor's own cycle p99 from the same pairs of slices (fsync on).
const handoffP99VsFloorGoal = 1.5

// With fsync off: at most this many etcd requests and watch events (etcd's
// count of those it sent) per handoff, at every contention level.
const (
	requestsPerHandoffGoal    = 3.0
	watchEventsPerHandoffGoal = 1.0
)

// throughputGoal is the minimum disco/etcd-mutex acquisitions-per-second
// ratio by number of contenders.
var throughputGoal = map[int]float64{2: 30, 8: 10, 32: 2}

// uncontendedGoal: disco's uncontended Lock+Unlock rate within this factor
// of one Put plus one Delete.
const uncontendedGoal = 1.1

// handoffVsPutDeleteGoal: at every contention level, disco's handoffs per
// second at least this many times one client's uncontended Put+Delete
// cycles per second, measured interleaved with them (fsync on). A handoff
// needs one commit (the holder's delete) and one watch event; a Put+Delete
// cycle two commits, and etcd shares one fsync among concurrent proposals.
const handoffVsPutDeleteGoal = 1.2

// flatnessGoal: disco's acquisitions per second at the highest contention
// level at least this fraction of those at flatnessBase contenders, the two
// measured interleaved (lockFlatness).
const (
	flatnessGoal = 0.8
	flatnessBase = 2
)

// loadGoalAt: at this many contenders, disco may make no more etcd requests
// per acquisition than etcd's Mutex.
const loadGoalAt = 128

// waitersCfg is the size of the lock-waiters scenario.
type waitersCfg struct{ waiters, clients int }

func allScenarios(contenders []int, guardGoroutines int, wc waitersCfg) []scenario {
	s := []scenario{{name: "lock-uncontended", run: lockUncontended}}
	for _, n := range contenders {
		s = append(s, scenario{name: fmt.Sprintf("lock-contended-%d", n),
			run: func(ctx context.Context, r *runner) (*result, error) { return lockContended(ctx, r, n) }})
	}
	if top := slices.Max(append([]int{0}, contenders...)); top > flatnessBase && slices.Contains(contenders, flatnessBase) {
		s = append(s, flatnessScenario("", discoLib, top))
	}
	s = append(s, scenario{name: fmt.Sprintf("lock-waiters-%d", wc.waiters), run: waitersScenario(wc.waiters, wc.clients)})
	s = append(s,
		scenario{name: "guard-check-1", run: guardScenario("check", 1)},
		scenario{name: fmt.Sprintf("guard-check-%d", guardGoroutines), run: guardScenario("check", guardGoroutines)},
		scenario{name: "guard-admit-1", run: guardScenario("admit", 1)},
		scenario{name: fmt.Sprintf("guard-admit-%d", guardGoroutines), run: guardScenario("admit", guardGoroutines)},
		scenario{name: "keyed-guard-store", run: keyedGuardStore},
		scenario{name: "keyed-guard-fleet", run: keyedGuardFleet},
		scenario{name: "guard-verify", run: guardVerify},
	)
	s = append(s, primitiveScenarios("", etcdLibs)...)
	s = append(s, scenario{name: fleetName(onEtcd), run: fleetScenario(etcdFleet)})
	s = append(s, storeScenarios(contenders)...)
	return s
}

// selectScenarios keeps the scenarios whose name matches any of the
// comma-separated regular expressions in filter ("" keeps all).
func selectScenarios(all []scenario, filter string) ([]scenario, error) {
	if strings.TrimSpace(filter) == "" {
		return all, nil
	}
	var res []*regexp.Regexp
	for _, f := range strings.Split(filter, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		re, err := regexp.Compile(f)
		if err != nil {
			return nil, fmt.Errorf("-scenarios %q: %w", f, err)
		}
		res = append(res, re)
	}
	var out []scenario
	for _, s := range all {
		for _, re := range res {
			if re.MatchString(s.name) {
				out = append(out, s)
				break
			}
		}
	}
	if len(out) == 0 {
		var names []string
		for _, s := range all {
			names = append(names, s.name)
		}
		return nil, fmt.Errorf("-scenarios %q matches none of: %s", filter, strings.Join(names, ", "))
	}
	return out, nil
}

// lockUncontended: one owner, Lock+Unlock in a loop, for disco, the
// Put+Delete floor and etcd's Mutex, the three interleaved.
func lockUncontended(ctx context.Context, r *runner) (*result, error) {
	const name = "lock-uncontended"
	pc := r.pairCfg()
	r.logf("  %s: disco, put+delete and %s, %d interleaved pairs of %v slices ...", name, etcdMutexLib.name, pc.pairs, pc.slice)
	iv, err := interleave(ctx, pc, openSlicer(r.env, discoLib), openSlicer(r.env, putDeleteLib), openSlicer(r.env, etcdMutexLib))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d, pd, m := iv.pooled[discoSide], iv.pooled[floorSide], iv.pooled[mutexSide]
	limitRow := &row{Scenario: name, Contenders: 1, Baseline: pd.Lib, Unit: "acq/s", Latency: "cycle", Disco: d, Base: pd}
	limitRow.floorFigures(iv, func(s *side) dist { return s.Cycle })
	limitRow.Goals = []goal{judgeFigure(fmt.Sprintf("within %.1fx of put+delete", uncontendedGoal), limitRow.VsFloor, true, 1/uncontendedGoal, "x",
		fmt.Sprintf(", needs >= %.2fx; pooled %.0f acq/s vs %.0f/s", 1/uncontendedGoal, d.PerSec, pd.PerSec))}
	return &result{Scenario: name,
		Rows: []*row{
			{Scenario: name, Contenders: 1, Baseline: m.Lib, Unit: "acq/s", Latency: "cycle", Disco: d, Base: m,
				VsBasePaired: figureOf(iv.perPair(discoSide, mutexSide, rateRatio))},
			limitRow,
		},
		chart: chart{title: "Uncontended Lock+Unlock latency (CDF)", xLabel: "Lock+Unlock (ms)",
			cdfs: []series{{"disco", d.cycles}, {"etcd-mutex", m.cycles}, {"put+delete", pd.cycles}}},
	}, nil
}

// The sides of the interleaved scenarios, in the order each pair measures
// them: disco first; then a two-sided scenario's reference (baseSide: disco
// at fewer contenders, a smaller fleet); the lock scenarios on etcd measure
// the Put+Delete floor (in the slice right after disco's), then etcd's
// Mutex.
const (
	discoSide = iota
	baseSide
	mutexSide

	floorSide = baseSide
)

// openSlicer opens one owner of lib alone, as a slicer.
func openSlicer(e *env, lib lockLib) func() (slicer, error) {
	return func() (slicer, error) { return openSoloOwner(e, lib) }
}

// openContentionSlicer opens n contending owners of lib, as a slicer.
func openContentionSlicer(e *env, lib lockLib, n int) func() (slicer, error) {
	return func() (slicer, error) { return openContention(e, lib, n) }
}

// floorFigures sets rw's floor figures from iv, disco (discoSide)
// interleaved with the Put+Delete floor (floorSide); lat picks disco's
// latency whose p99 is held against the floor's cycle p99.
func (rw *row) floorFigures(iv *interleaved, lat func(*side) dist) {
	rw.Floor = iv.pooled[floorSide]
	rw.VsFloor = figureOf(iv.perPair(discoSide, floorSide, rateRatio))
	rw.P99VsFloor = figureOf(iv.perPair(discoSide, floorSide, func(a, b *side) (float64, bool) {
		l := lat(a)
		return l.P99 / b.Cycle.P99, l.N > 0 && b.Cycle.N > 0 && b.Cycle.P99 > 0
	}))
	perAcq := func(f func(*load) float64) *figure {
		fig := figureOf(iv.perPair(discoSide, floorSide, func(a, _ *side) (float64, bool) {
			if a.Load == nil || a.Load.Acquisitions == 0 {
				return 0, false
			}
			return f(a.Load), true
		}))
		if fig != nil {
			// One acquisition's worth at each end of the smallest slice
			// counted.
			fewest := math.MaxInt
			iv.perPair(discoSide, floorSide, func(a, _ *side) (float64, bool) {
				if a.Load != nil && a.Load.Acquisitions > 0 {
					fewest = min(fewest, a.Load.Acquisitions)
				}
				return 0, false
			})
			fig.Resolution = 2 * fig.Median / float64(fewest)
		}
		return fig
	}
	rw.RequestsPerAcq = perAcq(func(l *load) float64 { return l.Requests })
	rw.WatchEventsPerAcq = perAcq(func(l *load) float64 { return l.WatchEvents })
}

// lockContended: n owners, each with its own client and session, on one
// lock: disco, the Put+Delete floor and etcd's Mutex, interleaved.
func lockContended(ctx context.Context, r *runner, n int) (*result, error) {
	name := fmt.Sprintf("lock-contended-%d", n)
	pc := r.pairCfg()
	r.logf("  %s: disco, put+delete and %s, %d interleaved pairs of %v slices ...", name, etcdMutexLib.name, pc.pairs, pc.slice)
	iv, err := interleave(ctx, pc, openContentionSlicer(r.env, discoLib, n), openSlicer(r.env, putDeleteLib),
		openContentionSlicer(r.env, etcdMutexLib, n))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d, pd, m := iv.pooled[discoSide], iv.pooled[floorSide], iv.pooled[mutexSide]
	if r.serialRead == nil {
		r.logf("  %s: serializable read (once per run) ...", name)
		sr, err := measureSerialRead(ctx, r.env, r.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: serializable read: %w", name, err)
		}
		r.serialRead = &sr
	}
	rw := &row{Scenario: name, Contenders: n, Baseline: m.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: m,
		VsBasePaired: figureOf(iv.perPair(discoSide, mutexSide, rateRatio))}
	rw.floorFigures(iv, func(s *side) dist { return s.Handoff })
	pooled := fmt.Sprintf("; pooled %.0f vs %.0f/s", d.PerSec, pd.PerSec)
	if r.env.fsync {
		rw.Goals = append(rw.Goals,
			judgeFigure(fmt.Sprintf(">= %gx put+delete", handoffVsPutDeleteGoal), rw.VsFloor, true, handoffVsPutDeleteGoal, "x", pooled),
			judgeFigure(fmt.Sprintf("handoff p99 <= %gx put+delete p99", handoffP99VsFloorGoal), rw.P99VsFloor, false, handoffP99VsFloorGoal, "x",
				fmt.Sprintf("; pooled %.2f vs %.2f ms", d.Handoff.P99, pd.Cycle.P99)))
	} else {
		pooledLoad := func(f func(*load) float64) string {
			if d.Load == nil {
				return ""
			}
			return fmt.Sprintf("; pooled %.2f", f(d.Load))
		}
		rw.Goals = append(rw.Goals,
			judgeFigure(fmt.Sprintf("requests/handoff <= %g", requestsPerHandoffGoal), rw.RequestsPerAcq, false, requestsPerHandoffGoal, "",
				pooledLoad(func(l *load) float64 { return l.Requests })),
			judgeFigure(fmt.Sprintf("watch events/handoff <= %g", watchEventsPerHandoffGoal), rw.WatchEventsPerAcq, false, watchEventsPerHandoffGoal, "",
				pooledLoad(func(l *load) float64 { return l.WatchEvents })))
	}
	if want, ok := throughputGoal[n]; ok {
		rw.Goals = append(rw.Goals, judgeFigure(fmt.Sprintf(">= %gx etcd-mutex acq/s", want), rw.VsBasePaired, true, want, "x",
			fmt.Sprintf("; pooled %.0f vs %.0f acq/s", d.PerSec, m.PerSec)))
	}
	if n == loadGoalAt {
		g := goal{Name: "requests/acq <= etcd-mutex", Status: "n/a", Detail: "no metrics endpoint (external etcd; pass -metrics)"}
		if d.Load != nil && m.Load != nil {
			g = judge(g.Name, d.Load.Requests <= m.Load.Requests,
				fmt.Sprintf("%.2f vs %.2f requests/acq", d.Load.Requests, m.Load.Requests))
		}
		rw.Goals = append(rw.Goals, g)
	}
	return &result{Scenario: name, Rows: []*row{rw},
		chart: chart{title: fmt.Sprintf("Lock, %d contenders: handoff (solid) and wait (dashed), CDF", n), xLabel: "latency (ms)",
			cdfs: []series{{"disco handoff", d.handoffs}, {"etcd-mutex handoff", m.handoffs},
				{"disco wait", d.waits}, {"etcd-mutex wait", m.waits}}},
	}, nil
}

// runSummary is what a run judged and measured beyond its scenarios' rows:
// the goals that compare scenarios, and figures measured once per run.
type runSummary struct {
	Goals []goal `json:"goals"`
	// How the lock scenarios interleaved their ratios' sides: pairs of
	// slices, each measured for Slice after SliceWarmup.
	Pairs       int    `json:"pairs"`
	Slice       string `json:"slice"`
	SliceWarmup string `json:"slice_warmup"`
	// One client's serializable single-key read Txn on an idle etcd (see
	// measureSerialRead): what a disco waiter's read after the delete
	// event costs, approximately. Measured with the first lock-contended
	// scenario.
	SerializableRead *dist `json:"serializable_read,omitempty"`
}

// summary judges the cross-scenario goals on results, the scenarios this
// run completed.
func (r *runner) summary(results []*result) *runSummary {
	pc := r.pairCfg()
	return &runSummary{Goals: flatness(r.contenders, results), SerializableRead: r.serialRead,
		Pairs: pc.pairs, Slice: pc.slice.String(), SliceWarmup: pc.warmup.String()}
}

// flatnessName is the scenario that judges flatness up to top contenders
// on the store of prefix ("" for etcd, "zk-", "redis-").
func flatnessName(prefix string, top int) string {
	return fmt.Sprintf("%slock-flatness-%d-%d", prefix, flatnessBase, top)
}

// flatnessScenario is lockFlatness for lib's store, named with prefix.
func flatnessScenario(prefix string, lib lockLib, top int) scenario {
	return scenario{name: flatnessName(prefix, top),
		run: func(ctx context.Context, r *runner) (*result, error) { return lockFlatness(ctx, r, prefix, lib, top) }}
}

// lockFlatness: disco's lock (lib) at top contenders interleaved with
// disco's at flatnessBase (two sets of owners, each in their own clients
// and sessions, on two locks), judged on the per-pair ratio of their rates.
func lockFlatness(ctx context.Context, r *runner, prefix string, lib lockLib, top int) (*result, error) {
	name := flatnessName(prefix, top)
	if err := r.env.start(lib.store); err != nil {
		return nil, err
	}
	pc := r.pairCfg()
	r.logf("  %s: disco at %d and at %d contenders, %d interleaved pairs of %v slices ...", name, top, flatnessBase, pc.pairs, pc.slice)
	iv, err := interleave(ctx, pc, openContentionSlicer(r.env, lib, top), openContentionSlicer(r.env, lib, flatnessBase))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	d, b := iv.pooled[discoSide], iv.pooled[baseSide]
	b.Lib = fmt.Sprintf("disco@%d", flatnessBase)
	rw := &row{Scenario: name, Contenders: top, Baseline: b.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: b,
		VsBasePaired: figureOf(iv.perPair(discoSide, baseSide, rateRatio))}
	rw.Goals = []goal{judgeFigure(flatnessGoalName(prefix, top), rw.VsBasePaired, true, flatnessGoal, "x",
		fmt.Sprintf("; pooled %.0f vs %.0f acq/s", d.PerSec, b.PerSec))}
	return &result{Scenario: name, Rows: []*row{rw},
		chart: chart{title: fmt.Sprintf("Lock on %s, %d and %d contenders interleaved: handoff, CDF", lib.store, top, flatnessBase), xLabel: "handoff (ms)",
			cdfs: []series{{fmt.Sprintf("disco@%d handoff", top), d.handoffs}, {b.Lib + " handoff", b.handoffs}}},
	}, nil
}

// flatnessGoalName names the flatness goal on the store of prefix.
func flatnessGoalName(prefix string, top int) string {
	store := ""
	if prefix != "" {
		store = " on " + strings.TrimSuffix(prefix, "-")
	}
	return fmt.Sprintf("lock flatness%s: disco acq/s at %d >= %gx at %d", store, top, flatnessGoal, flatnessBase)
}

// flatness is the cross-scenario copy of lockFlatness's goal on etcd, for
// the highest of levels: n/a unless that scenario ran; then the same goal
// on each other store whose flatness scenario ran.
func flatness(levels []int, results []*result) []goal {
	top := slices.Max(append([]int{0}, levels...))
	name := flatnessGoalName("", top)
	if top <= flatnessBase || !slices.Contains(levels, flatnessBase) {
		return []goal{{Name: name, Status: "n/a", Detail: fmt.Sprintf("needs %d and a higher level in -contenders", flatnessBase)}}
	}
	var etcd *goal
	var stores []goal
	for _, res := range results {
		for _, rw := range res.Rows {
			switch {
			case len(rw.Goals) == 0:
			case rw.Scenario == flatnessName("", top):
				etcd = &rw.Goals[0]
			case rw.Scenario == flatnessName("zk-", top) || rw.Scenario == flatnessName("redis-", top):
				stores = append(stores, rw.Goals[0])
			}
		}
	}
	if etcd == nil {
		etcd = &goal{Name: name, Status: "n/a", Detail: flatnessName("", top) + " not run"}
	}
	return append([]goal{*etcd}, stores...)
}

func ratioOf(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// guardScenario: Check (or Admit+done) throughput, no etcd, against a
// high-water mark behind a sync.Mutex for Check.
func guardScenario(op string, goroutines int) func(ctx context.Context, r *runner) (*result, error) {
	return func(ctx context.Context, r *runner) (*result, error) {
		name := fmt.Sprintf("guard-%s-%d", op, goroutines)
		r.logf("  %s: %d goroutine(s) ...", name, goroutines)
		g := guard.New()
		f := guardCheck
		if op == "admit" {
			f = guardAdmit
		}
		d := runGuard(ctx, "disco", goroutines, func(t fencing.Token) error { return f(g, t) }, r.cfg)
		rw := &row{Scenario: name, Contenders: goroutines, Unit: "ops/s", Disco: d}
		bars := []bar{{"disco guard." + op, d.PerSec / 1e6}}
		if op == "check" {
			mm := &mutexMark{}
			b := runGuard(ctx, "sync.Mutex mark", goroutines, mm.check, r.cfg)
			rw.Baseline, rw.Base = b.Lib, b
			bars = append(bars, bar{b.Lib, b.PerSec / 1e6})
		}
		return &result{Scenario: name, Rows: []*row{rw},
			chart: chart{title: fmt.Sprintf("guard %s, %d goroutine(s)", op, goroutines), yLabel: "million ops/s", bars: bars}}, nil
	}
}
