package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testserver"
)

// The test binary starts one embedded etcd on first use (or uses
// ETCD_ENDPOINTS) and shares it among tests and benchmarks.
var (
	fsyncFlag = flag.Bool("bench.fsync", true, "embedded etcd: fsync (false: unsafe, faster)")

	envOnce sync.Once
	testEnv *env
	envErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	quietGRPC()
	code := m.Run()
	if testEnv != nil {
		if err := testEnv.close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing etcd:", err)
		}
	}
	os.Exit(code)
}

func sharedEnv(tb testing.TB) *env {
	tb.Helper()
	envOnce.Do(func() { testEnv, envErr = startEnv(envCfg{fsync: *fsyncFlag}) })
	if envErr != nil {
		tb.Fatal(envErr)
	}
	return testEnv
}

// BenchmarkLockUncontended: one owner, Lock then Unlock per op, and the
// Put+Delete limit. ns/op is one whole cycle.
func BenchmarkLockUncontended(b *testing.B) {
	e := sharedEnv(b)
	for _, lib := range []lockLib{discoLib, etcdMutexLib, putDeleteLib} {
		name := lib.name
		if name == putDeleteLib.name {
			name = "put-delete"
		}
		b.Run(name, func(b *testing.B) {
			os, err := openLockers(e, lib, e.prefix("b-uncontended-"+lib.name), 1, newMeter(e, lib.store))
			if err != nil {
				b.Fatal(err)
			}
			defer os.close()
			l, ctx := os.hs[0], context.Background()
			cycles := make([]time.Duration, 0, b.N)
			start := time.Now()
			for b.Loop() {
				t0 := time.Now()
				if _, err := l.lock(ctx); err != nil {
					b.Fatal(err)
				}
				if err := l.unlock(ctx); err != nil {
					b.Fatal(err)
				}
				cycles = append(cycles, time.Since(t0))
			}
			d := summarize(cycles)
			b.ReportMetric(float64(len(cycles))/time.Since(start).Seconds(), "acq/s")
			b.ReportMetric(d.P50, "p50-ms")
			b.ReportMetric(d.P99, "p99-ms")
		})
	}
}

// BenchmarkLockContended: N owners, each with its own client and session,
// share one lock; b.N acquisitions in all. ns/op is time per acquisition;
// p50-ms and p99-ms are handoff latencies (previous holder calls Unlock ->
// next holder's Lock returns).
func BenchmarkLockContended(b *testing.B) {
	e := sharedEnv(b)
	for _, lib := range []lockLib{discoLib, etcdMutexLib} {
		b.Run(lib.name, func(b *testing.B) {
			for _, n := range []int{2, 8, 32, 128} {
				b.Run(fmt.Sprintf("contenders=%d", n), func(b *testing.B) {
					cfg := runCfg{maxAcq: b.N, ready: b.ResetTimer, finished: b.StopTimer}
					s, err := runContended(context.Background(), e, lib, n, cfg)
					if err != nil {
						b.Fatal(err)
					}
					if s.Errors > 0 {
						b.Fatalf("%d errors, first: %s", s.Errors, s.FirstErr)
					}
					b.ReportMetric(s.PerSec, "acq/s")
					b.ReportMetric(s.Handoff.P50, "p50-ms")
					b.ReportMetric(s.Handoff.P99, "p99-ms")
				})
			}
		})
	}
}

// BenchmarkElectionFailover: three candidates, each with its own client and
// session; the leader leaves (Resign, or Close with a fresh candidate taking
// its seat) and the next one leads; b.N failovers in all. ns/op is time per
// failover; p50-ms and p99-ms are failover latencies (the leader calls Resign
// or Close -> the next leader's Campaign returns).
func BenchmarkElectionFailover(b *testing.B) {
	e := sharedEnv(b)
	for _, lib := range []electionLib{discoElectionLib, etcdElectionLib} {
		b.Run(lib.name, func(b *testing.B) {
			for _, mode := range []failMode{failResign, failClose} {
				b.Run(string(mode), func(b *testing.B) {
					fc := failoverCfg{mode: mode, candidates: electionCandidates, ttl: electionTTL}
					cfg := runCfg{maxAcq: b.N, ready: b.ResetTimer, finished: b.StopTimer}
					s, err := runFailover(context.Background(), e, lib, fc, cfg)
					if err != nil {
						b.Fatal(err)
					}
					if s.Errors > 0 {
						b.Fatalf("%d errors, first: %s", s.Errors, s.FirstErr)
					}
					b.ReportMetric(s.PerSec, "failovers/s")
					b.ReportMetric(s.Handoff.P50, "p50-ms")
					b.ReportMetric(s.Handoff.P99, "p99-ms")
				})
			}
		})
	}
}

// TestScenariosSmoke runs every kind of scenario briefly with few
// contenders and checks that the results are sane. It judges no speed.
func TestScenariosSmoke(t *testing.T) {
	e := sharedEnv(t)
	r := &runner{env: e, cfg: runCfg{warmup: 50 * time.Millisecond, duration: 200 * time.Millisecond},
		contenders: []int{2}, guardGoroutines: 4, expiryTTL: time.Second, expiryRounds: 1, pairs: tinyPairs,
		fleet: fleetCfg{candidates: 12, sessions: 3, small: 3, rounds: 3}}
	all := allScenarios(r.contenders, r.guardGoroutines, waitersCfg{waiters: 20, clients: 4})
	// The semaphore at semManyWaiters owners is the same kind as at
	// semContenders, and no brief run (under -race on two cores its etcd's
	// metrics page alone took over 5 s to answer).
	// On ZooKeeper and Redis, the lock and the semaphore: the rwlock and
	// election scenarios there run the same code as on etcd, with other
	// libs (go run ./bench runs them all).
	all = slices.DeleteFunc(all, func(s scenario) bool {
		offEtcd := strings.HasPrefix(s.name, "zk-") || strings.HasPrefix(s.name, "redis-")
		return strings.HasSuffix(s.name, fmt.Sprintf("-of-%d", semManyWaiters)) ||
			offEtcd && (strings.Contains(s.name, "rwlock-") || strings.Contains(s.name, "election-"))
	})
	var results []*result
	for _, s := range all {
		res, err := s.run(context.Background(), r)
		if err == nil && idle(res) {
			// A loaded machine (the race detector, parallel packages) can
			// give no acquisition at all in so short a window: once more,
			// with a longer one.
			slow := *r
			slow.cfg.duration = 2 * time.Second
			slow.pairs.slice = time.Second
			res, err = s.run(context.Background(), &slow)
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		results = append(results, res)
		if res.Scenario != s.name || len(res.Rows) == 0 {
			t.Fatalf("%s: result %q with %d rows", s.name, res.Scenario, len(res.Rows))
		}
		for _, row := range res.Rows {
			for _, sd := range []*side{row.Disco, row.Base} {
				if sd == nil {
					continue
				}
				if sd.Count <= 0 || sd.PerSec <= 0 || sd.Errors != 0 {
					t.Errorf("%s %s: count %d, %.0f/s, %d errors (%s)", s.name, sd.Lib, sd.Count, sd.PerSec, sd.Errors, sd.FirstErr)
				}
				if row.Latency == "" {
					continue
				}
				if sd.Wait.N == 0 || sd.Wait.P50 <= 0 || sd.Wait.P99 < sd.Wait.P50 {
					t.Errorf("%s %s: wait latency %+v", s.name, sd.Lib, sd.Wait)
				}
				if (row.Latency == "handoff" || row.Latency == "failover") && (sd.Handoff.N == 0 || sd.Handoff.P99 < sd.Handoff.P50) {
					t.Errorf("%s %s: handoff latency %+v", s.name, sd.Lib, sd.Handoff)
				}
				if row.Latency == "failover" && sd.Handoff.N != sd.Count {
					t.Errorf("%s %s: %d failover samples for %d failovers", s.name, sd.Lib, sd.Handoff.N, sd.Count)
				}
				if strings.HasPrefix(s.name, "lock-waiters") && (sd.Footprint == nil || sd.Footprint.Waiters != 19) {
					t.Errorf("%s %s: footprint %+v", s.name, sd.Lib, sd.Footprint)
				}
				if s.name == "election-failover-expiry" && sd.VanishedClose == nil {
					t.Errorf("%s %s: no close timing of the vanished candidates", s.name, sd.Lib)
				}
				if row.Latency == "cycle" && sd.Cycle.N != sd.Count {
					t.Errorf("%s %s: %d cycles for %d acquisitions", s.name, sd.Lib, sd.Cycle.N, sd.Count)
				}
				// The load window is short here and metrics are sampled
				// around it: require a reading, not a count. An external
				// etcd without -metrics has none; ZooKeeper and Redis
				// always.
				offEtcd := strings.HasPrefix(s.name, "zk-") || strings.HasPrefix(s.name, "redis-")
				if (!e.external || offEtcd) && (sd.Load == nil || sd.Load.Requests < 0) {
					t.Errorf("%s %s: load %+v", s.name, sd.Lib, sd.Load)
					continue
				}
				// Every disco semaphore counts its wakeups, on every store.
				if sd == row.Disco && strings.Contains(s.name, "semaphore-") && (sd.Load.Wakeups == nil || *sd.Load.Wakeups < 0) {
					t.Errorf("%s %s: no wakeups counted: %+v", s.name, sd.Lib, sd.Load)
				}
			}
			for _, g := range row.Goals {
				if !slices.Contains(statuses, g.Status) {
					t.Errorf("%s: goal %+v", s.name, g)
				}
			}
			if strings.HasPrefix(s.name, "lock-contended-") {
				checkFloor(t, row, tinyPairs.pairs, e.fsync)
				checkSplit(t, s.name, row.Disco)
			}
		}
	}
	// Every mark store has its raise row: PostgreSQL's too wherever it is
	// installed, on a server the run starts.
	raises := []string{"file", "sqlite", "etcd"}
	if testserver.PostgresInstalled() || os.Getenv("DATABASE_URL") != "" {
		raises = append(raises, "postgres")
	}
	for _, res := range results {
		if res.Scenario != "keyed-guard-store" {
			continue
		}
		for _, st := range raises {
			if !slices.ContainsFunc(res.Rows, func(rw *row) bool { return rw.Scenario == res.Scenario+"/raise-"+st }) {
				t.Errorf("%s: no raise row for the %s store", res.Scenario, st)
			}
		}
	}
	sum := r.summary(results)
	if len(sum.Goals) == 0 || !strings.HasPrefix(sum.Goals[0].Name, "lock flatness") ||
		!slices.Contains(statuses, sum.Goals[0].Status) {
		t.Errorf("cross-scenario goals %+v", sum.Goals)
	}
	if sum.Pairs != tinyPairs.pairs || sum.Slice != tinyPairs.slice.String() {
		t.Errorf("summary's pairs %d of %s, want %+v", sum.Pairs, sum.Slice, tinyPairs)
	}
	if sr := sum.SerializableRead; sr == nil || sr.N == 0 || sr.P50 <= 0 || sr.P99 < sr.P50 {
		t.Errorf("serializable read %+v", sr)
	}
	var sb strings.Builder
	if err := printTable(&sb, results, sum, e, r.cfg); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if !strings.Contains(sb.String(), s.name) {
			t.Errorf("table lacks %s:\n%s", s.name, sb.String())
		}
	}
	for _, want := range []string{"goals across scenarios:", sum.Goals[0].Name + ": " + sum.Goals[0].Status, "lock ratios to the floor: 2 interleaved pairs",
		"DISCO/FLOOR", fmtFigure(floorRow(results, "lock-contended-2").VsFloor, "x"), fmtFigure(floorRow(results, "lock-uncontended").VsFloor, "x"),
		"lock-contended-2 disco handoff p50 ", "= Unlock (delete commit) p50 ", "; serializable read p50 "} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, sb.String())
		}
	}
	dir := t.TempDir()
	files, err := writeOutputs(dir, time.Now(), results, sum, e, r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + len(all); len(files) != want {
		t.Errorf("wrote %d files, want %d: %v", len(files), want, files)
	}
	data, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Summary struct {
			Goals            []goal `json:"goals"`
			Pairs            int    `json:"pairs"`
			SerializableRead *dist  `json:"serializable_read"`
		} `json:"summary"`
		Results []struct {
			Rows []struct {
				Scenario   string  `json:"scenario"`
				Floor      *side   `json:"floor"`
				VsFloor    *figure `json:"vs_floor"`
				P99VsFloor *figure `json:"p99_vs_floor"`
			} `json:"rows"`
		} `json:"results"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Summary.Goals) != len(sum.Goals) || rep.Summary.Goals[0] != sum.Goals[0] || rep.Summary.Pairs != sum.Pairs ||
		rep.Summary.SerializableRead == nil || *rep.Summary.SerializableRead != *sum.SerializableRead {
		t.Errorf("results.json summary %+v, want %+v", rep.Summary, sum)
	}
	found := false
	for _, res := range rep.Results {
		for _, rw := range res.Rows {
			if rw.Scenario != "lock-contended-2" {
				continue
			}
			want := floorRow(results, rw.Scenario)
			found = rw.Floor != nil && rw.Floor.PerSec == want.Floor.PerSec && rw.VsFloor != nil && rw.VsFloor.Median == want.VsFloor.Median &&
				slices.Equal(rw.VsFloor.PerPair, want.VsFloor.PerPair) && rw.P99VsFloor != nil
		}
	}
	if !found {
		t.Errorf("results.json lacks lock-contended-2's floor figures:\n%s", data)
	}
}

// tinyPairs is the interleaving of the tests: the fewest pairs that have a
// spread, in short slices (go run ./bench requires at least minPairs).
var tinyPairs = pairCfg{pairs: 2, slice: 100 * time.Millisecond, warmup: 20 * time.Millisecond}

// tinyRunner is a runner with short windows and tinyPairs.
func tinyRunner(t *testing.T) *runner {
	return &runner{env: sharedEnv(t), cfg: runCfg{warmup: 50 * time.Millisecond, duration: 200 * time.Millisecond}, pairs: tinyPairs}
}

// statuses are the goal statuses bench prints.
var statuses = []string{"met", "MISSED", statusInconclusive, "n/a"}

// floorRow returns the row of scenario that carries floor figures, or an
// empty row.
func floorRow(results []*result, scenario string) *row {
	for _, res := range results {
		for _, rw := range res.Rows {
			if rw.Scenario == scenario && rw.Floor != nil {
				return rw
			}
		}
	}
	return &row{}
}

// checkFloor checks a lock-contended row's interleaved floor: measured in
// every pair, its figures from each pair, its goals judged on them (never
// n/a: both sides ran).
func checkFloor(t *testing.T, rw *row, pairs int, fsync bool) {
	t.Helper()
	if f := rw.Floor; f == nil || f.Lib != putDeleteLib.name || f.Count <= 0 || f.Cycle.N != f.Count {
		t.Errorf("%s: floor %+v", rw.Scenario, rw.Floor)
	}
	for name, f := range map[string]*figure{"vs floor": rw.VsFloor, "p99 vs floor": rw.P99VsFloor} {
		if f == nil || len(f.PerPair) == 0 || len(f.PerPair) > pairs || f.Q1 > f.Median || f.Median > f.Q3 || f.Q1 <= 0 {
			t.Errorf("%s: %s %+v", rw.Scenario, name, f)
		}
	}
	want := []string{">= 1.2x put+delete", "handoff p99 <= 1.5x put+delete p99"}
	if !fsync {
		want = []string{"requests/handoff <= 3", "watch events/handoff <= 1"}
	}
	for _, name := range want {
		if g := goalNamed(rw, name); g == nil || g.Status == "n/a" {
			t.Errorf("%s: goal %q: %+v in %+v", rw.Scenario, name, g, rw.Goals)
		}
	}
}

// checkSplit checks a contended disco side's handoff split: every handoff
// split, and the parts' means adding up to the handoff's.
func checkSplit(t *testing.T, scenario string, d *side) {
	t.Helper()
	sp := d.Split
	if sp == nil || sp.Handoff.N == 0 || sp.Handoff.N != d.Handoff.N || sp.Unlock.N != sp.Handoff.N || sp.Rest.N != sp.Handoff.N ||
		sp.Unlock.P50 <= 0 || sp.Handoff != d.Handoff {
		t.Errorf("%s: handoff split %+v of handoffs %+v", scenario, sp, d.Handoff)
		return
	}
	if diff := sp.Handoff.Mean - sp.Unlock.Mean - sp.Rest.Mean; diff > 1e-5 || diff < -1e-5 { // ms: 10ns of rounding
		t.Errorf("%s: means %.6f != %.6f + %.6f ms", scenario, sp.Handoff.Mean, sp.Unlock.Mean, sp.Rest.Mean)
	}
}

// TestFlatness: the cross-scenario flatness goals are lock-flatness's on
// etcd, for the highest level, then those of each other store whose
// flatness scenario ran.
func TestFlatness(t *testing.T) {
	met := goal{Name: flatnessGoalName("", 128), Status: "met", Detail: "0.95x [0.90..0.99] (median [IQR] of 7 pairs)"}
	zkMissed := goal{Name: flatnessGoalName("zk-", 128), Status: "MISSED", Detail: "0.70x [0.65..0.72] (median [IQR] of 7 pairs)"}
	flat := func(prefix string, top int, g goal) *result {
		name := flatnessName(prefix, top)
		return &result{Scenario: name, Rows: []*row{{Scenario: name, Contenders: top, Goals: []goal{g}}}}
	}
	for _, tc := range []struct {
		levels  []int
		results []*result
		want    []goal
	}{
		{[]int{2, 8, 32, 128}, []*result{flat("", 128, met)}, []goal{met}},
		{[]int{2, 8, 32, 128}, []*result{flat("zk-", 128, zkMissed), flat("", 128, met)}, []goal{met, zkMissed}},
		{[]int{2, 8, 32, 128}, []*result{flat("", 32, met)}, []goal{{Name: flatnessGoalName("", 128), Status: "n/a", Detail: "lock-flatness-2-128 not run"}}},
		{[]int{8, 32}, nil, []goal{{Name: flatnessGoalName("", 32), Status: "n/a", Detail: "needs 2 and a higher level in -contenders"}}},
		{[]int{2}, nil, []goal{{Name: flatnessGoalName("", 2), Status: "n/a", Detail: "needs 2 and a higher level in -contenders"}}},
	} {
		if g := flatness(tc.levels, tc.results); !slices.Equal(g, tc.want) {
			t.Errorf("levels %v: %+v, want %+v", tc.levels, g, tc.want)
		}
	}
	if got := flatnessGoalName("zk-", 128); got != "lock flatness on zk: disco acq/s at 128 >= 0.8x at 2" {
		t.Errorf("zk flatness goal named %q", got)
	}
}

// TestLockFlatness: disco at two levels, interleaved, judged on the
// per-pair ratio of their rates.
func TestLockFlatness(t *testing.T) {
	r := tinyRunner(t)
	res, err := lockFlatness(context.Background(), r, "", discoLib, 3)
	if err != nil {
		t.Fatal(err)
	}
	rw := res.Rows[0]
	if rw.Scenario != "lock-flatness-2-3" || rw.Disco.Lib != "disco" || rw.Base.Lib != "disco@2" || rw.Disco.Count == 0 || rw.Base.Count == 0 ||
		rw.Disco.Errors+rw.Base.Errors != 0 {
		t.Fatalf("row %+v: disco %+v, base %+v", rw, rw.Disco, rw.Base)
	}
	if f := rw.VsBasePaired; f == nil || len(f.PerPair) != tinyPairs.pairs || f.Q1 > f.Median || f.Median > f.Q3 {
		t.Errorf("per-pair ratio %+v", f)
	}
	if len(rw.Goals) != 1 || rw.Goals[0].Name != flatnessGoalName("", 3) || rw.Goals[0].Status == "n/a" {
		t.Errorf("goals %+v", rw.Goals)
	}
	if g := flatness([]int{2, 3}, []*result{res}); len(g) != 1 || g[0] != rw.Goals[0] {
		t.Errorf("summary's flatness %+v, row's %+v", g, rw.Goals[0])
	}
}

// TestFigure: the median and interquartile range of per-pair values, and
// the verdicts judged on them.
func TestFigure(t *testing.T) {
	if f := figureOf(nil); f != nil {
		t.Errorf("no values: %+v", f)
	}
	vals := []float64{1.4, 1.0, 1.6, 1.2, 1.3, 1.1, 1.5} // 7 pairs, as measured
	f := figureOf(vals)
	if f.Median != 1.3 || math.Abs(f.Q1-1.15) > 1e-9 || math.Abs(f.Q3-1.45) > 1e-9 || !slices.Equal(f.PerPair, vals) {
		t.Errorf("figure %+v", f)
	}
	if vals[0] != 1.4 {
		t.Error("figureOf reordered its input")
	}
	if f := figureOf([]float64{2}); f.Median != 2 || f.Q1 != 2 || f.Q3 != 2 {
		t.Errorf("one pair: %+v", f)
	}
	for _, tc := range []struct {
		atLeast   bool
		threshold float64
		status    string
	}{
		{true, 1.1, "met"}, {true, 1.14, "met"}, {true, 1.2, statusInconclusive}, {true, 1.44, statusInconclusive}, {true, 1.46, "MISSED"},
		{false, 1.5, "met"}, {false, 1.46, "met"}, {false, 1.3, statusInconclusive}, {false, 1.16, statusInconclusive}, {false, 1.14, "MISSED"},
	} {
		g := judgeFigure("g", f, tc.atLeast, tc.threshold, "x", "; more")
		if g.Status != tc.status || g.Detail != "1.30x [1.15..1.45] (median [IQR] of 7 pairs); more" {
			t.Errorf("at least %v %v: %+v, want %s", tc.atLeast, tc.threshold, g, tc.status)
		}
	}
	if g := judgeFigure("g", nil, true, 1, "x", ""); g.Status != "n/a" {
		t.Errorf("nothing measured: %+v", g)
	}
	// A count per acquisition at its threshold, off by the counting at
	// the slices' ends, is on it: events per handoff of 0.998 to 1.002,
	// counted to within 0.003, meet "at most 1"; 1.004 and above miss it.
	events := figureOf([]float64{0.998, 1.002, 1.0, 0.999, 1.001})
	events.Resolution = 0.003
	if g := judgeFigure("g", events, false, 1, "", ""); g.Status != "met" {
		t.Errorf("events at the threshold within the resolution: %+v", g)
	}
	over := figureOf([]float64{1.004, 1.006, 1.005})
	over.Resolution = 0.003
	if g := judgeFigure("g", over, false, 1, "", ""); g.Status != "MISSED" {
		t.Errorf("events over the threshold by more than the resolution: %+v", g)
	}
	// A count's verdict is readable off its figures: three decimals and
	// the resolution, where two decimals would print "1.00 [1.00..1.00]"
	// beside "inconclusive".
	edge := figureOf([]float64{1.0, 1.001, 1.002, 1.006, 1.007})
	edge.Resolution = 0.003
	g := judgeFigure("g", edge, false, 1, "", "")
	if want := "1.002 [1.001..1.006] (median [IQR] of 5 pairs; counted to within 0.003)"; g.Status != statusInconclusive || g.Detail != want {
		t.Errorf("count at its threshold: %+v, want inconclusive, %q", g, want)
	}
}

// TestPoolSides: a side pooled from slices adds their counts and windows,
// pools their samples and weights their load by their acquisitions.
func TestPoolSides(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	a := &side{Lib: "disco", Count: 3, Window: time.Second, handoffs: ms(1, 2, 3), waits: ms(1, 1, 1),
		Load:  &load{Store: "etcd", Acquisitions: 3, Requests: 4, WatchEvents: 2, ByMethod: map[string]float64{"Txn": 4}, Wakeups: ptr(1.0)},
		Split: newHandoffSplit(ms(1, 2, 3), ms(1, 1, 1), ms(0, 1, 2))}
	b := &side{Lib: "disco", Count: 1, Window: time.Second, handoffs: ms(9), waits: ms(5), Errors: 1, FirstErr: "boom",
		Load:  &load{Store: "etcd", Acquisitions: 1, Requests: 8, WatchEvents: 2, ByMethod: map[string]float64{"Txn": 8}, Wakeups: ptr(5.0)},
		Split: newHandoffSplit(ms(9), ms(4), ms(5))}
	p := poolSides([]*side{a, b})
	if p.Lib != "disco" || p.Count != 4 || p.Window != 2*time.Second || p.PerSec != 2 || p.Errors != 1 || p.FirstErr != "boom" {
		t.Errorf("pooled %+v", p)
	}
	if p.Handoff.N != 4 || p.Handoff.Max != 9 || p.Wait.N != 4 || p.Wait.Max != 5 {
		t.Errorf("pooled samples: handoff %+v, wait %+v", p.Handoff, p.Wait)
	}
	if l := p.Load; l == nil || l.Acquisitions != 4 || l.Requests != 5 || l.WatchEvents != 2 || l.ByMethod["Txn"] != 5 || *l.Wakeups != 2 {
		t.Errorf("pooled load %+v", p.Load)
	}
	if sp := p.Split; sp == nil || sp.Handoff.N != 4 || sp.Handoff.Mean != 3.75 || sp.Unlock.Mean != 1.75 || sp.Rest.Mean != 2 {
		t.Errorf("pooled split %+v", p.Split)
	}
	b.Load = nil
	if p := poolSides([]*side{a, b}); p.Load != nil {
		t.Errorf("a slice without load pooled into %+v", p.Load)
	}
}

// goalNamed returns the goal of row named name, or nil.
func goalNamed(row *row, name string) *goal {
	for i := range row.Goals {
		if row.Goals[i].Name == name {
			return &row.Goals[i]
		}
	}
	return nil
}

// TestContendedInterleaves: a lock-contended scenario measures its own
// floor, interleaved with disco, in every pair; the serializable read once
// per run.
func TestContendedInterleaves(t *testing.T) {
	r := tinyRunner(t)
	res, err := lockContended(context.Background(), r, 2)
	if err != nil {
		t.Fatal(err)
	}
	rw := res.Rows[0]
	checkFloor(t, rw, tinyPairs.pairs, r.env.fsync)
	if d := rw.Disco; d.Count == 0 || d.Window < time.Duration(tinyPairs.pairs)*tinyPairs.slice-time.Millisecond || d.Errors != 0 {
		t.Errorf("disco pooled over %d slices of %v: %+v", tinyPairs.pairs, tinyPairs.slice, d)
	}
	// etcd's Mutex is a third side of the same pairs: its goal is judged
	// on the per-pair ratios, and its pooled side spans every slice.
	if m := rw.Base; m == nil || m.Lib != etcdMutexLib.name || m.Count == 0 || m.Window < time.Duration(tinyPairs.pairs)*tinyPairs.slice-time.Millisecond {
		t.Errorf("etcd's Mutex pooled over %d slices of %v: %+v", tinyPairs.pairs, tinyPairs.slice, rw.Base)
	}
	// A pair whose short Mutex slice saw no handoff (under -race the
	// Mutex's can take 100 ms) has no ratio: at least one pair must.
	if f := rw.VsBasePaired; f == nil || len(f.PerPair) == 0 || len(f.PerPair) > tinyPairs.pairs || f.Q1 > f.Median || f.Median > f.Q3 {
		t.Errorf("disco over etcd's Mutex per pair: %+v", f)
	} else if g := goalNamed(rw, ">= 30x etcd-mutex acq/s"); g == nil || g.Status == "n/a" || !strings.HasPrefix(g.Detail, fmtFigure(f, "x")) {
		t.Errorf("goal against etcd's Mutex not judged on the per-pair ratios %s: %+v", fmtFigure(f, "x"), g)
	}
	sr := r.serialRead
	if sr == nil || sr.N == 0 {
		t.Fatalf("serializable read %+v", sr)
	}
	res2, err := lockContended(context.Background(), r, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.serialRead != sr {
		t.Error("the serializable read was measured again in the same run")
	}
	if res2.Rows[0].Floor == rw.Floor {
		t.Error("the second scenario reused the first one's floor")
	}
}

// idle reports whether a side of res made no acquisition and no error.
func idle(res *result) bool {
	for _, row := range res.Rows {
		for _, sd := range []*side{row.Disco, row.Base} {
			if sd != nil && sd.Count == 0 && sd.Errors == 0 {
				return true
			}
		}
	}
	return false
}

func TestSelectScenarios(t *testing.T) {
	all := allScenarios([]int{2, 8, 32, 128}, 64, waitersCfg{defaultWaiters, defaultWaiterSessions})
	for filter, want := range map[string]int{
		"":                                  len(all),
		"lock-contended":                    4,
		"^lock-flatness-2-128":              1,
		"lock-waiters":                      1,
		"contended-(2|8)$":                  2,
		"guard-check-1,uncont":              2,
		"^guard":                            5,
		"^election":                         4,
		"^election-fleet":                   1,
		"^election-failover-(resign|close)": 2,
		"^zk-":                              len(slices.DeleteFunc(slices.Clone(all), func(s scenario) bool { return !strings.HasPrefix(s.name, "zk-") })),
	} {
		got, err := selectScenarios(all, filter)
		if err != nil || len(got) != want {
			t.Errorf("filter %q: %d scenarios, %v; want %d", filter, len(got), err, want)
		}
	}
	if _, err := selectScenarios(all, "nothing-like-this"); err == nil {
		t.Error("a filter matching nothing was accepted")
	}
}

// TestElectionFleet: the fleet scenario at a small size measures every
// failover on both sizes, counts the observers' deliveries, and judges
// every goal, with the candidates' footprint beside. It judges no speed.
func TestElectionFleet(t *testing.T) {
	r := tinyRunner(t)
	r.fleet = fleetCfg{candidates: 12, sessions: 3, small: 3, rounds: 3}
	res, err := fleetScenario(etcdFleet)(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	rw := res.Rows[0]
	if rw.Scenario != "election-fleet-1000" || rw.Contenders != 12 || rw.Base.Lib != "disco@3" {
		t.Fatalf("row %+v", rw)
	}
	// The two sizes are measured interleaved: each side pools its pairs'
	// slices, of 3 failovers each, and the p50 goal is judged on the
	// per-pair ratios.
	want := tinyPairs.pairs * 3
	for _, sd := range []*side{rw.Disco, rw.Base} {
		if sd.Count != want || sd.Handoff.N != want || sd.Load == nil || sd.Load.Requests <= 0 || sd.Load.Wakeups == nil {
			t.Errorf("%s: %d failovers (want %d), handoff %+v, load %+v", sd.Lib, sd.Count, want, sd.Handoff, sd.Load)
		}
	}
	if len(rw.Goals) != 4 {
		t.Fatalf("goals %+v", rw.Goals)
	}
	if f := rw.VsBasePaired; f == nil || len(f.PerPair) != tinyPairs.pairs {
		t.Errorf("failovers/s per pair: %+v", f)
	}
	if f := rw.P50VsBasePaired; f == nil || len(f.PerPair) != tinyPairs.pairs {
		t.Errorf("failover p50 ratio per pair, for the JSON: %+v", f)
	}
	if g := rw.Goals[2]; !strings.Contains(g.Detail, fmt.Sprintf("(median [IQR] of %d pairs)", tinyPairs.pairs)) {
		t.Errorf("p50 goal not judged on %d pairs: %+v", tinyPairs.pairs, g)
	}
	if fp := rw.Disco.Footprint; fp == nil || fp.Waiters != 12 || fp.Sessions != 3 {
		t.Errorf("footprint %+v", fp)
	}
	for _, g := range rw.Goals {
		if !slices.Contains(statuses, g.Status) || g.Status == "n/a" {
			t.Errorf("goal %q: %s (%s)", g.Name, g.Status, g.Detail)
		}
	}
}
