package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// printTable writes one line per row: throughput, latency and the store's
// load for disco and its baseline, and every goal judged plainly.
func printTable(w io.Writer, results []*result, sum *runSummary, e *env, cfg runCfg) error {
	fmt.Fprintf(w, "disco bench: etcd %s, %v per side (+%v warmup), GOMAXPROCS=%d, %s\n",
		e.backend(), cfg.duration, cfg.warmup, runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintln(w, "latency in ms as p50/p99; handoff = previous holder calls Unlock -> next holder's Lock returns; cycle = one uncontended Lock+Unlock;")
	fmt.Fprintln(w, "failover = the leader calls Resign or Close, or its client vanishes -> the next leader's Campaign returns (elections: acq = failover);")
	fmt.Fprintln(w, "scenarios without a store prefix run on etcd; zk- on one ZooKeeper server (no fsync); redis- on one redis-server (appendfsync always);")
	fmt.Fprintln(w, "req/acq = requests the store received per acquisition, counted by the store: etcd gRPC request messages (lease keepalives left out),")
	fmt.Fprintln(w, "  ZooKeeper packets received (srvr; pings left out: each session's, a third of its 10 s timeout apart), Redis commands its clients sent (a hook; a script is one; session refreshes left out);")
	fmt.Fprintln(w, "wakeups/acq = watch events or wake messages a side's clients acted on per acquisition, counted by the clients: disco's disco_wakeups_total on every store;")
	fmt.Fprintln(w, "  zk-lock: the watch events its connections delivered; redis-setnx-poll: none (it polls); etcd's recipes: n/a (see etcd-ev/acq);")
	fmt.Fprintln(w, "etcd-ev/acq = watch events etcd sent per acquisition (etcd_debugging_mvcc_events_total), etcd scenarios only;")
	fmt.Fprintln(w, "floor = one client's uncontended Put+Delete cycles (rate, cycle p50/p99), measured interleaved with disco and etcd's Mutex in slices A B C A B C ...;")
	fmt.Fprintln(w, "  disco/vs with a range: median [interquartile range] of the per-pair ratios (disco against etcd's Mutex; lock-flatness: against disco at 2; election fleets: against 8 candidates);")
	fmt.Fprintln(w, "  disco/floor and p99/floor p99 (disco's handoff or cycle p99 over the floor's cycle p99): median [interquartile range] of the per-pair ratios;")
	fmt.Fprintln(w, "  a goal is met or MISSED when that whole range is on one side of its threshold, inconclusive when the threshold lies within it")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tN\tVS\tDISCO\tVS\tDISCO/VS\tLATENCY\tDISCO p50/p99\tVS p50/p99\tFLOOR\tDISCO/FLOOR\tp99/FLOOR p99\tREQ/ACQ disco|vs\tWAKEUPS/ACQ disco|vs\tETCD-EV/ACQ disco|vs\tGOALS")
	var notes []string
	for _, res := range results {
		for _, r := range res.Rows {
			base, basePS, ratio, baseLat := "-", "-", "-", "-"
			if r.Base != nil {
				base = r.Base.Lib
				basePS = fmtRate(r.Base.PerSec, r.Unit)
				ratio = fmt.Sprintf("%.2fx", ratioOf(r.Disco.PerSec, r.Base.PerSec))
				if r.VsBasePaired != nil {
					ratio = fmtFigure(r.VsBasePaired, "x")
				}
				baseLat = fmtLat(r.Base, r.Latency)
			}
			floor := "-"
			if r.Floor != nil {
				floor = fmtRate(r.Floor.PerSec, "/s") + " " + fmtLat(r.Floor, "cycle")
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				r.Scenario, r.Contenders, base, fmtRate(r.Disco.PerSec, r.Unit), basePS, ratio,
				orDash(r.Latency), fmtLat(r.Disco, r.Latency), baseLat,
				floor, fmtFigure(r.VsFloor, "x"), fmtFigure(r.P99VsFloor, "x"),
				fmtLoad(r, func(l *load) *float64 { return &l.Requests }),
				fmtLoad(r, func(l *load) *float64 { return l.Wakeups }),
				fmtLoad(r, func(l *load) *float64 {
					if l.Store != "" && l.Store != string(onEtcd) { // "": a guard store's, read from etcd's page
						return nil
					}
					return &l.WatchEvents
				}),
				fmtGoals(r))
			for _, s := range []*side{r.Disco, r.Base} {
				if s != nil && s.Footprint != nil {
					f := s.Footprint
					where := ""
					if f.Embedded {
						where = " (process-wide, the embedded etcd's share included)"
					}
					notes = append(notes, fmt.Sprintf("%s %s: %d parked waiters over %d leases and %d connections: %.2f goroutines and %.1f KiB heap per waiter%s",
						r.Scenario, s.Lib, f.Waiters, f.Sessions, f.Clients, f.Goroutines, f.HeapBytes/1024, where))
				}
				if s != nil && s.Settle != nil {
					state := "went quiet"
					if !s.Settle.Settled {
						state = "was still busy (the window counts the queueing's tail)"
					}
					notes = append(notes, fmt.Sprintf("%s %s: etcd %s %v after the last waiter queued",
						r.Scenario, s.Lib, state, s.Settle.Waited.Round(time.Second)))
				}
				if s != nil && s.Errors > 0 {
					notes = append(notes, fmt.Sprintf("ERROR %s %s: %d errors, first: %s", r.Scenario, s.Lib, s.Errors, s.FirstErr))
				}
				if s != nil && s.Load != nil && s.Load.WakeMessages != nil && s.Load.Rechecks != nil {
					notes = append(notes, fmt.Sprintf("%s %s: per acquisition %.2f wake messages received by the sessions, %.2f wakeups (a waiter or an election's watcher woken by one), %.2f timed looks",
						r.Scenario, s.Lib, *s.Load.WakeMessages, *s.Load.Wakeups, *s.Load.Rechecks))
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	printSummary(w, sum)
	printSplits(w, results, sum)
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	return nil
}

// printSummary writes the goals judged across scenarios.
func printSummary(w io.Writer, sum *runSummary) {
	if sum == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "lock ratios to the floor: %d interleaved pairs of slices, each %s measured after %s unmeasured\n", sum.Pairs, sum.Slice, sum.SliceWarmup)
	fmt.Fprintln(w, "goals across scenarios:")
	for _, g := range sum.Goals {
		fmt.Fprintf(w, "  %s: %s (%s)\n", g.Name, g.Status, g.Detail)
	}
}

// printSplits writes where the time of a disco handoff goes, per
// lock-contended level: what bench timed from outside the lock, and what it
// infers from that.
func printSplits(w io.Writer, results []*result, sum *runSummary) {
	var lines []string
	for _, res := range results {
		for _, r := range res.Rows {
			sp := r.Disco.Split
			if !strings.HasPrefix(r.Scenario, "lock-contended-") || sp == nil || sp.Handoff.N == 0 {
				continue
			}
			line := fmt.Sprintf("  %s disco handoff p50 %.2f ms = Unlock (delete commit) p50 %.2f ms + rest %.2f ms",
				r.Scenario, sp.Handoff.P50, sp.Unlock.P50, sp.Handoff.P50-sp.Unlock.P50)
			if sum != nil && sum.SerializableRead != nil {
				line += fmt.Sprintf("; serializable read p50 %.2f ms", sum.SerializableRead.P50)
			}
			if r.Floor != nil && r.Floor.Cycle.N > 0 {
				line += fmt.Sprintf("; one commit ~ floor cycle p50 / 2 = %.2f ms", r.Floor.Cycle.P50/2)
			}
			lines = append(lines, line+fmt.Sprintf(" (means %.2f = %.2f + %.2f ms, %d handoffs)",
				sp.Handoff.Mean, sp.Unlock.Mean, sp.Rest.Mean, sp.Handoff.N))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "where a disco handoff's time goes, timed from outside the lock:")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "  Unlock: the previous holder's Unlock call, timed: its delete's commit as its client sees it, plus its session loop's bookkeeping.")
	fmt.Fprintln(w, "  rest: handoff p50 minus Unlock p50, inferred, not timed apart: the watch event's delivery + the waiter's read + its session loop + client.")
	fmt.Fprintln(w, "  Means add up handoff by handoff; p50s need not (rest can be negative: the next Lock may return before the Unlock does).")
	if sum != nil && sum.SerializableRead != nil {
		fmt.Fprintf(w, "  serializable read: one client's Txn of one Compare and a serializable Get of one key, on an idle etcd, %d reads once per run:\n", sum.SerializableRead.N)
		fmt.Fprintln(w, "  it approximates the waiter's read after the delete event (that one reads a prefix, under contention).")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtRate(v float64, unit string) string {
	switch {
	case v >= 10e6:
		return fmt.Sprintf("%.1fM %s", v/1e6, unit)
	case v >= 100e3:
		return fmt.Sprintf("%.0fk %s", v/1e3, unit)
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f %s", v, unit)
	default: // e.g. failovers that each wait for a lease to expire
		return fmt.Sprintf("%.2f %s", v, unit)
	}
}

func fmtLat(s *side, kind string) string {
	var d dist
	switch kind {
	case "handoff", "failover":
		d = s.Handoff
	case "cycle":
		d = s.Cycle
	case "wait":
		d = s.Wait
	default:
		return "-"
	}
	if d.N == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f/%.2f", d.P50, d.P99)
}

// fmtLoad shows the figure f picks from each side's load: "-" where there
// is no side or no store (a guard), n/a where it was not measured (f
// gives nil).
func fmtLoad(r *row, f func(*load) *float64) string {
	if r.Latency == "" { // no store in this scenario
		return "-"
	}
	one := func(s *side) string {
		if s == nil {
			return "-"
		}
		if s.Load == nil {
			return "n/a"
		}
		v := f(s.Load)
		if v == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.2f", *v)
	}
	return one(r.Disco) + " | " + one(r.Base)
}

func fmtGoals(r *row) string {
	var parts []string
	for _, g := range r.Goals {
		parts = append(parts, fmt.Sprintf("%s: %s (%s)", g.Name, g.Status, g.Detail))
	}
	for _, s := range []*side{r.Disco, r.Base} {
		if s != nil && s.Errors > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d ERRORS", s.Lib, s.Errors))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// report is the JSON file's content.
type report struct {
	Started    time.Time `json:"started"`
	Backend    string    `json:"backend"`
	Fsync      bool      `json:"fsync"`
	External   bool      `json:"external"`
	Duration   string    `json:"duration_per_side"`
	Warmup     string    `json:"warmup"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	GoVersion  string    `json:"go_version"`
	Results    []*result `json:"results"`
	// Goals judged across scenarios, and the references of the goals.
	Summary *runSummary `json:"summary,omitempty"`
}

// writeOutputs writes results.json and one PNG chart per scenario into dir.
func writeOutputs(dir string, started time.Time, results []*result, sum *runSummary, e *env, cfg runCfg) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rep := report{Started: started, Backend: e.backend(), Fsync: e.fsync, External: e.external,
		Duration: cfg.duration.String(), Warmup: cfg.warmup.String(),
		GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Results: results, Summary: sum}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "results.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	files := []string{path}
	for _, res := range results {
		p := filepath.Join(dir, res.Scenario+".png")
		ok, err := res.chart.save(p)
		if err != nil {
			return files, fmt.Errorf("chart %s: %w", p, err)
		}
		if ok {
			files = append(files, p)
		}
	}
	return files, nil
}
