package main

import (
	"context"
	"fmt"
	"io"
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

	// Figures measured at most once per run, when a goal first needs them,
	// and shared by every scenario of the run that judges against them.
	// Scenarios run one after another: no locking.
	putDelete     *side  // one client's uncontended Put+Delete cycles
	putDeleteFrom string // the scenario that measured putDelete
	serialRead    *dist  // a waiter-like serializable read Txn (measureSerialRead)
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
}

// goal is one target from the issue, judged on this run.
type goal struct {
	Name   string `json:"name"`
	Status string `json:"status"` // met, MISSED, n/a
	Detail string `json:"detail"`
}

func judge(name string, ok bool, detail string) goal {
	st := "MISSED"
	if ok {
		st = "met"
	}
	return goal{Name: name, Status: st, Detail: detail}
}

// Goals from the issue.
const handoffP99Goal = 5.0 // ms, disco, every contention level

// throughputGoal is the minimum disco/etcd-mutex acquisitions-per-second
// ratio by number of contenders.
var throughputGoal = map[int]float64{2: 30, 8: 10, 32: 2}

// uncontendedGoal: disco's uncontended Lock+Unlock rate within this factor
// of one Put plus one Delete.
const uncontendedGoal = 1.1

// handoffVsPutDeleteGoal: at every contention level, disco's handoffs per
// second at least this many times one client's uncontended Put+Delete
// cycles per second, measured in the same run. A handoff needs one commit
// (the holder's delete) and one watch event; a Put+Delete cycle two commits.
const handoffVsPutDeleteGoal = 1.2

// flatnessGoal: disco's acquisitions per second at the highest contention
// level at least this fraction of those at flatnessBase contenders, both
// measured in the same run (a cross-scenario goal, judged after them all).
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

// lockUncontended: one owner, Lock+Unlock in a loop, for disco, etcd's
// Mutex, and the Put+Delete limit.
func lockUncontended(ctx context.Context, r *runner) (*result, error) {
	const name = "lock-uncontended"
	sides := map[string]*side{}
	for _, lib := range []lockLib{discoLib, etcdMutexLib, putDeleteLib} {
		r.logf("  %s: %s ...", name, lib.name)
		s, err := runUncontended(ctx, r.env, lib, r.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
		}
		sides[lib.name] = s
	}
	d, m, pd := sides[discoLib.name], sides[etcdMutexLib.name], sides[putDeleteLib.name]
	// The run's Put+Delete reference: the contended goals judge against it.
	r.putDelete, r.putDeleteFrom = pd, name
	limitRow := &row{Scenario: name, Contenders: 1, Baseline: pd.Lib, Unit: "acq/s", Latency: "cycle", Disco: d, Base: pd}
	floor := pd.PerSec / uncontendedGoal
	limitRow.Goals = []goal{judge(fmt.Sprintf("within %.1fx of put+delete", uncontendedGoal), d.PerSec >= floor,
		fmt.Sprintf("%.0f acq/s vs limit %.0f/s (needs >= %.0f)", d.PerSec, pd.PerSec, floor))}
	return &result{Scenario: name,
		Rows: []*row{
			{Scenario: name, Contenders: 1, Baseline: m.Lib, Unit: "acq/s", Latency: "cycle", Disco: d, Base: m},
			limitRow,
		},
		chart: chart{title: "Uncontended Lock+Unlock latency (CDF)", xLabel: "Lock+Unlock (ms)",
			cdfs: []series{{"disco", d.cycles}, {"etcd-mutex", m.cycles}, {"put+delete", pd.cycles}}},
	}, nil
}

// lockContended: n owners, each with its own client and session, on one lock.
func lockContended(ctx context.Context, r *runner, n int) (*result, error) {
	name := fmt.Sprintf("lock-contended-%d", n)
	var sides []*side
	for _, lib := range []lockLib{discoLib, etcdMutexLib} {
		r.logf("  %s: %s ...", name, lib.name)
		s, err := runContended(ctx, r.env, lib, n, r.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", name, lib.name, err)
		}
		sides = append(sides, s)
	}
	pd, err := r.putDeleteRef(ctx, name)
	if err != nil {
		return nil, err
	}
	if r.serialRead == nil {
		r.logf("  %s: serializable read (once per run) ...", name)
		sr, err := measureSerialRead(ctx, r.env, r.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: serializable read: %w", name, err)
		}
		r.serialRead = &sr
	}
	d, m := sides[0], sides[1]
	rw := &row{Scenario: name, Contenders: n, Baseline: m.Lib, Unit: "acq/s", Latency: "handoff", Disco: d, Base: m}
	pdRatio := ratioOf(d.PerSec, pd.PerSec)
	rw.Goals = append(rw.Goals, judge(fmt.Sprintf(">= %gx put+delete", handoffVsPutDeleteGoal), pd.PerSec > 0 && pdRatio >= handoffVsPutDeleteGoal,
		fmt.Sprintf("%.2fx (%.0f vs %.0f/s)", pdRatio, d.PerSec, pd.PerSec)))
	rw.Goals = append(rw.Goals, judge(fmt.Sprintf("handoff p99 < %gms", handoffP99Goal), d.Handoff.N > 0 && d.Handoff.P99 < handoffP99Goal,
		fmt.Sprintf("disco handoff p99 %.2fms", d.Handoff.P99)))
	if want, ok := throughputGoal[n]; ok {
		ratio := ratioOf(d.PerSec, m.PerSec)
		rw.Goals = append(rw.Goals, judge(fmt.Sprintf(">= %gx etcd-mutex acq/s", want), ratio >= want,
			fmt.Sprintf("%.1fx (%.0f vs %.0f acq/s)", ratio, d.PerSec, m.PerSec)))
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

// putDeleteRef returns the run's Put+Delete reference: lock-uncontended's
// put+delete side when that scenario ran, else one measured now, once per
// run, by the same loop (runUncontended with putDeleteLib).
func (r *runner) putDeleteRef(ctx context.Context, scenario string) (*side, error) {
	if r.putDelete == nil {
		r.logf("  %s: put+delete reference (lock-uncontended not run) ...", scenario)
		s, err := runUncontended(ctx, r.env, putDeleteLib, r.cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: put+delete reference: %w", scenario, err)
		}
		r.putDelete, r.putDeleteFrom = s, scenario
	}
	return r.putDelete, nil
}

// runSummary is what a run judged and measured beyond its scenarios' rows:
// the goals that compare scenarios, and the figures goals were judged
// against.
type runSummary struct {
	Goals         []goal `json:"goals"`
	PutDelete     *side  `json:"put_delete,omitempty"`             // the Put+Delete reference of the contended goals
	PutDeleteFrom string `json:"put_delete_measured_in,omitempty"` // the scenario that measured it
	// One client's serializable single-key read Txn on an idle etcd (see
	// measureSerialRead): what a disco waiter's read after the delete
	// event costs, approximately. Measured with the first lock-contended
	// scenario.
	SerializableRead *dist `json:"serializable_read,omitempty"`
}

// summary judges the cross-scenario goals on results, the scenarios this
// run completed.
func (r *runner) summary(results []*result) *runSummary {
	return &runSummary{Goals: []goal{flatness(r.contenders, results)},
		PutDelete: r.putDelete, PutDeleteFrom: r.putDeleteFrom, SerializableRead: r.serialRead}
}

// flatness judges disco's acquisitions per second at the highest of levels
// against those at flatnessBase contenders, from the lock-contended rows of
// results: n/a unless both ran.
func flatness(levels []int, results []*result) goal {
	top := 0
	for _, n := range levels {
		top = max(top, n)
	}
	name := fmt.Sprintf("lock-contended flatness: disco acq/s at %d >= %gx at %d", top, flatnessGoal, flatnessBase)
	if top <= flatnessBase || !slices.Contains(levels, flatnessBase) {
		return goal{Name: name, Status: "n/a", Detail: fmt.Sprintf("needs %d and a higher level in -contenders", flatnessBase)}
	}
	rate := map[int]float64{}
	for _, res := range results {
		for _, rw := range res.Rows {
			if rw.Scenario == fmt.Sprintf("lock-contended-%d", rw.Contenders) && rw.Disco != nil {
				rate[rw.Contenders] = rw.Disco.PerSec
			}
		}
	}
	var missing []string
	for _, n := range []int{flatnessBase, top} {
		if _, ok := rate[n]; !ok {
			missing = append(missing, fmt.Sprintf("lock-contended-%d", n))
		}
	}
	if len(missing) > 0 {
		return goal{Name: name, Status: "n/a", Detail: strings.Join(missing, " and ") + " not run"}
	}
	ratio := ratioOf(rate[top], rate[flatnessBase])
	return judge(name, rate[flatnessBase] > 0 && ratio >= flatnessGoal,
		fmt.Sprintf("%.2fx (%.0f vs %.0f acq/s)", ratio, rate[top], rate[flatnessBase]))
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
