package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
		contenders: []int{2}, guardGoroutines: 4, expiryTTL: time.Second, expiryRounds: 1}
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
				if !slices.Contains([]string{"met", "MISSED", "n/a"}, g.Status) {
					t.Errorf("%s: goal %+v", s.name, g)
				}
			}
			if strings.HasPrefix(s.name, "lock-contended-") {
				// Judged against a rate measured in this run: never n/a.
				if g := goalNamed(row, ">= 1.2x put+delete"); g == nil || g.Status == "n/a" {
					t.Errorf("%s: put+delete goal %+v in %+v", s.name, g, row.Goals)
				}
				checkSplit(t, s.name, row.Disco)
			}
		}
	}
	sum := r.summary(results)
	if len(sum.Goals) == 0 || !strings.HasPrefix(sum.Goals[0].Name, "lock-contended flatness") ||
		!slices.Contains([]string{"met", "MISSED", "n/a"}, sum.Goals[0].Status) {
		t.Errorf("cross-scenario goals %+v", sum.Goals)
	}
	if sum.PutDelete == nil || sum.PutDeleteFrom != "lock-uncontended" {
		t.Errorf("put+delete reference %+v from %q", sum.PutDelete, sum.PutDeleteFrom)
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
	for _, want := range []string{"goals across scenarios:", sum.Goals[0].Name + ": " + sum.Goals[0].Status, "put+delete reference",
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
			PutDelete        *side  `json:"put_delete"`
			SerializableRead *dist  `json:"serializable_read"`
		} `json:"summary"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Summary.Goals) != len(sum.Goals) || rep.Summary.Goals[0] != sum.Goals[0] || rep.Summary.PutDelete == nil ||
		rep.Summary.SerializableRead == nil || *rep.Summary.SerializableRead != *sum.SerializableRead {
		t.Errorf("results.json summary %+v, want %+v", rep.Summary, sum)
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

// TestFlatness judges the cross-scenario goal on made-up results.
func TestFlatness(t *testing.T) {
	contended := func(n int, perSec float64) *result {
		name := fmt.Sprintf("lock-contended-%d", n)
		return &result{Scenario: name, Rows: []*row{{Scenario: name, Contenders: n,
			Disco: &side{Lib: "disco", PerSec: perSec}, Base: &side{Lib: "etcd-mutex", PerSec: 1}}}}
	}
	redis := &result{Scenario: "redis-lock-128", Rows: []*row{{Scenario: "redis-lock-128", Contenders: 128,
		Disco: &side{Lib: "disco-etcd", PerSec: 1e6}}}}
	for _, tc := range []struct {
		levels  []int
		results []*result
		status  string
		detail  string
	}{
		{[]int{2, 8, 32, 128}, []*result{contended(2, 1000), contended(8, 900), contended(128, 800)}, "met", "0.80x (800 vs 1000 acq/s)"},
		{[]int{2, 8, 32, 128}, []*result{contended(2, 1000), contended(128, 799)}, "MISSED", "0.80x (799 vs 1000 acq/s)"},
		{[]int{2, 128}, []*result{contended(2, 0), contended(128, 0)}, "MISSED", "0.00x (0 vs 0 acq/s)"},
		{[]int{2, 8, 32, 128}, []*result{contended(2, 1000), contended(8, 900), redis}, "n/a", "lock-contended-128 not run"},
		{[]int{2, 8}, []*result{contended(8, 900)}, "n/a", "lock-contended-2 not run"},
		{[]int{8, 32}, []*result{contended(8, 900), contended(32, 900)}, "n/a", "needs 2 and a higher level in -contenders"},
		{[]int{2}, []*result{contended(2, 1000)}, "n/a", "needs 2 and a higher level in -contenders"},
		{[]int{2, 128}, nil, "n/a", "lock-contended-2 and lock-contended-128 not run"},
	} {
		g := flatness(tc.levels, tc.results)
		if g.Status != tc.status || g.Detail != tc.detail {
			t.Errorf("levels %v: %+v, want %s (%s)", tc.levels, g, tc.status, tc.detail)
		}
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

// TestContendedMeasuresReferences: without lock-uncontended, the first
// lock-contended scenario of a run measures the Put+Delete reference (and,
// always, the serializable read), and later ones use those same
// measurements.
func TestContendedMeasuresReferences(t *testing.T) {
	r := &runner{env: sharedEnv(t), cfg: runCfg{warmup: 50 * time.Millisecond, duration: 200 * time.Millisecond}}
	res, err := lockContended(context.Background(), r, 2)
	if err != nil {
		t.Fatal(err)
	}
	pd := r.putDelete
	if pd == nil || pd.Lib != putDeleteLib.name || pd.Count == 0 || r.putDeleteFrom != "lock-contended-2" {
		t.Fatalf("reference %+v from %q", pd, r.putDeleteFrom)
	}
	g := goalNamed(res.Rows[0], ">= 1.2x put+delete")
	if g == nil || g.Status == "n/a" || !strings.Contains(g.Detail, fmt.Sprintf("vs %.0f/s", pd.PerSec)) {
		t.Fatalf("goal %+v, reference %.0f/s", g, pd.PerSec)
	}
	sr := r.serialRead
	if sr == nil || sr.N == 0 {
		t.Fatalf("serializable read %+v", sr)
	}
	if _, err := lockContended(context.Background(), r, 2); err != nil {
		t.Fatal(err)
	}
	if r.putDelete != pd || r.serialRead != sr {
		t.Error("a reference was measured again in the same run")
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
		"lock-waiters":                      1,
		"contended-(2|8)$":                  2,
		"guard-check-1,uncont":              2,
		"^guard":                            5,
		"^election":                         3,
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
