// Command bench measures disco's lock, rwlock, election failover, semaphore
// and fencing guard under contention, side by side with etcd's own recipes
// (concurrency.Mutex, recipes.RWMutex, concurrency.Election) on the same etcd
// in the same run, and judges the goals from the issue. The zk- and redis-
// scenarios run the same primitives on one ZooKeeper and one Redis server
// (when installed), the lock beside go-zookeeper's zk.Lock and a SET NX
// polling lock. Every row prints the store's requests and the clients'
// wakeups (disco_wakeups_total) per acquisition.
//
// The lock scenarios on etcd measure disco interleaved with the floor, one
// client's uncontended Put+Delete cycles, in -pairs pairs of -slice slices,
// and judge their goals on the median and interquartile range of the
// per-pair ratios (met, MISSED, or inconclusive); see bench/README.md.
//
//	go run ./bench                      # embedded etcd, real fsync
//	go run ./bench -fsync=false         # embedded etcd, no fsync
//	ETCD_ENDPOINTS=http://h:2379 go run ./bench -metrics http://h:2381/metrics
//	go run ./bench -scenarios 'contended-(2|8)$,guard' -duration 5s -out results/
//	go run ./bench -scenarios election -expiry-ttl 1s -expiry-rounds 5
//
// Progress goes to stderr, the table to stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/ahrtr/disco/etcdio/embedded"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		duration   = flag.Duration("duration", 3*time.Second, "measured time per side of each scenario")
		warmup     = flag.Duration("warmup", 300*time.Millisecond, "unmeasured time before each side's measurement")
		filter     = flag.String("scenarios", "", "comma-separated regular expressions; run only scenarios whose name matches one (default all)")
		out        = flag.String("out", "", "directory for results.json and one PNG chart per scenario")
		fsync      = flag.Bool("fsync", true, "embedded etcd: fsync its WAL and backend (false: unsafe, faster)")
		metrics    = flag.String("metrics", "", "Prometheus URL of the etcd under test, to measure load per acquisition with ETCD_ENDPOINTS (embedded: automatic)")
		contenders = flag.String("contenders", "2,8,32,128", "contention levels for lock-contended-N")
		guardG     = flag.Int("guard-goroutines", 64, "goroutines for the many-goroutine guard scenarios")
		expiryTTL  = flag.Duration("expiry-ttl", defaultExpiryTTL, "lease TTL in election-failover-expiry (whole seconds); each failover there takes about this long")
		expiryN    = flag.Int("expiry-rounds", defaultExpiryRounds, "failovers per side in election-failover-expiry")
		list       = flag.Bool("list", false, "list scenario names and exit")
		members    = flag.Int("cluster", 0, "embedded: start a cluster of this many members (3 is typical) instead of one, with proxies on every client and peer link")
		delay      = flag.Duration("delay", 0, "with -cluster: latency added to every link, each way (e.g. 1ms, 5ms)")
		waiters    = flag.Int("waiters", defaultWaiters, "waiters parked on one lock in lock-waiters-N")
		waiterClis = flag.Int("waiter-sessions", defaultWaiterSessions, "client connections (disco: one session each) the waiters are spread over")
		pairs      = flag.Int("pairs", minPairs, "lock scenarios: interleaved pairs of slices (disco, floor) per ratio, at least 7")
		slice      = flag.Duration("slice", defaultSlice, "lock scenarios: measured time of each side's slice of a pair")
		sliceWarm  = flag.Duration("slice-warmup", defaultSliceWarmup, "lock scenarios: unmeasured time at the start of each slice")
		cpuProfile = flag.String("cpuprofile", "", "write a CPU profile of the whole run (etcd included when embedded) to this file")
	)
	flag.Parse()
	levels, err := parseInts(*contenders)
	if err != nil {
		return fmt.Errorf("-contenders: %w", err)
	}
	if *members < 0 || *members > embedded.MaxClusterSize || *delay < 0 || *delay > 0 && *members == 0 {
		return fmt.Errorf("-cluster must be 0..%d, -delay >= 0 and only with -cluster", embedded.MaxClusterSize)
	}
	if *waiters < 2 || *waiterClis < 1 || *waiterClis > *waiters {
		return errors.New("-waiters must be >= 2 and -waiter-sessions between 1 and -waiters")
	}
	if *duration <= 0 || *warmup < 0 || *guardG < 1 {
		return errors.New("-duration must be > 0, -warmup >= 0, -guard-goroutines >= 1")
	}
	if *pairs < minPairs || *slice <= 0 || *sliceWarm < 0 {
		return fmt.Errorf("-pairs must be >= %d, -slice > 0, -slice-warmup >= 0", minPairs)
	}
	if *expiryTTL < time.Second || *expiryTTL%time.Second != 0 || *expiryN < 1 {
		return errors.New("-expiry-ttl must be whole seconds, at least 1s; -expiry-rounds >= 1")
	}
	all := allScenarios(levels, *guardG, waitersCfg{*waiters, *waiterClis})
	if *list {
		for _, s := range all {
			fmt.Println(s.name)
		}
		return nil
	}
	chosen, err := selectScenarios(all, *filter)
	if err != nil {
		return err
	}

	quietGRPC()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	started := time.Now()
	e, err := startEnv(envCfg{fsync: *fsync, metricsURL: *metrics, members: *members, delay: *delay})
	if err != nil {
		return err
	}
	defer e.close()
	cfg := runCfg{warmup: *warmup, duration: *duration}
	r := &runner{env: e, cfg: cfg, progress: os.Stderr, contenders: levels, guardGoroutines: *guardG,
		expiryTTL: *expiryTTL, expiryRounds: *expiryN, pairs: pairCfg{pairs: *pairs, slice: *slice, warmup: *sliceWarm}}
	fmt.Fprintf(os.Stderr, "bench: %d scenarios on etcd %s\n", len(chosen), e.backend())
	results, err := runAll(ctx, r, chosen)
	if len(results) > 0 {
		sum := r.summary(results)
		for _, g := range sum.Goals {
			fmt.Fprintf(os.Stderr, "bench: %s: %s\n", g.Name, g.Status)
		}
		if perr := printTable(os.Stdout, results, sum, e, cfg); perr != nil {
			return perr
		}
		if *out != "" {
			files, werr := writeOutputs(*out, started, results, sum, e, cfg)
			for _, f := range files {
				fmt.Fprintln(os.Stderr, "bench: wrote", f)
			}
			if werr != nil {
				return werr
			}
		}
	}
	fmt.Fprintf(os.Stderr, "bench: done in %v\n", time.Since(started).Round(time.Second))
	return err
}

// runAll runs the scenarios one after another, printing a progress line
// for each. It stops at the first error, returning what it has.
func runAll(ctx context.Context, r *runner, chosen []scenario) ([]*result, error) {
	var results []*result
	for i, s := range chosen {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", i+1, len(chosen), s.name)
		t0 := time.Now()
		res, err := s.run(ctx, r)
		if err != nil {
			return results, err
		}
		res.Elapsed = time.Since(t0)
		for _, row := range res.Rows {
			line := fmt.Sprintf("[%d/%d] %s vs %s: disco %.0f %s", i+1, len(chosen), s.name, orDash(row.Baseline), row.Disco.PerSec, row.Unit)
			if row.Base != nil {
				line += fmt.Sprintf(", %s %.0f %s", row.Base.Lib, row.Base.PerSec, row.Unit)
			}
			for _, g := range row.Goals {
				line += fmt.Sprintf("; %s: %s", g.Name, g.Status)
			}
			fmt.Fprintln(os.Stderr, line)
		}
		results = append(results, res)
	}
	return results, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad contention level %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
