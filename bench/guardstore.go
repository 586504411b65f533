package main

import (
	"context"
	"database/sql"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/internal/testserver"
)

// guardStoreGoroutines is how many goroutines present the same token to a
// keyed guard in the keyed-guard-store scenario.
const guardStoreGoroutines = 64

// storedGuardGoal: a keyed guard on a store, with equal tokens, within this
// factor of an in-memory keyed guard's throughput.
const storedGuardGoal = 2.0

// keyedGuardStore: (1) a Keyed guard on a file store it alone uses
// (WithExclusiveStore) against an in-memory Keyed guard, 64 goroutines
// admitting the token equal to the mark (the steady state: no store
// access); (2) the cost of one mark raise for each store: file, SQLite,
// etcd, and PostgreSQL (see markStores).
func keyedGuardStore(ctx context.Context, r *runner) (*result, error) {
	const name = "keyed-guard-store"
	dir, err := os.MkdirTemp("", "disco-bench-marks-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	file, err := markstore.NewFile(filepath.Join(dir, "files"))
	if err != nil {
		return nil, err
	}
	const scope, tok = "/bench/keyed", fencing.Token(42)
	admit := func(k *guard.Keyed) func(fencing.Token) error {
		return func(fencing.Token) error { return admitKeyed(k, scope, tok) }
	}
	r.logf("  %s: in-memory keyed guard, %d goroutines ...", name, guardStoreGoroutines)
	mem := guard.NewKeyed()
	if err := mem.Check(scope, tok); err != nil {
		return nil, err
	}
	memSide := runGuard(ctx, "keyed in-memory", guardStoreGoroutines, admit(mem), r.cfg)
	r.logf("  %s: keyed guard on a file store it alone uses, %d goroutines ...", name, guardStoreGoroutines)
	stored := guard.NewKeyed(guard.WithStore(file), guard.WithExclusiveStore())
	if err := stored.Check(scope, tok); err != nil {
		return nil, err
	}
	storedSide := runGuard(ctx, "keyed on file store, exclusive", guardStoreGoroutines, admit(stored), r.cfg)
	steady := &row{Scenario: name, Contenders: guardStoreGoroutines, Baseline: memSide.Lib, Unit: "ops/s",
		Disco: storedSide, Base: memSide}
	ratio := ratioOf(memSide.PerSec, storedSide.PerSec)
	steady.Goals = []goal{judge(fmt.Sprintf("within %gx of in-memory keyed", storedGuardGoal),
		storedSide.PerSec > 0 && ratio <= storedGuardGoal,
		fmt.Sprintf("%.0f vs %.0f ops/s (in-memory/stored %.2f)", storedSide.PerSec, memSide.PerSec, ratio))}
	rows := []*row{steady}
	bars := []bar{{memSide.Lib, memSide.PerSec}, {storedSide.Lib, storedSide.PerSec}}

	stores := markStores(r, dir)
	for _, st := range stores {
		r.logf("  %s: mark raises, %s store ...", name, st.name)
		s, closeStore, err := st.open()
		if err != nil {
			return nil, fmt.Errorf("%s: %s store: %w", name, st.name, err)
		}
		// etcd requests per raise (0 but for etcd's store)
		sd, err := withEtcdLoad(ctx, r, func() *side { return runRaises(ctx, st.name+" store raise", s, r.cfg) })
		closeStore()
		if err != nil {
			return nil, err
		}
		rows = append(rows, &row{Scenario: name + "/raise-" + st.name, Contenders: 1, Unit: "raises/s", Latency: "cycle", Disco: sd})
	}
	return &result{Scenario: name, Rows: rows,
		chart: chart{title: fmt.Sprintf("keyed guard, %d goroutines, equal tokens", guardStoreGoroutines), yLabel: "million ops/s", bars: bars}}, nil
}

// markStore opens one kind of mark store for a scenario.
type markStore struct {
	name string
	open func() (guard.MarkStore, func(), error)
}

// markStores are the stores the guard scenarios measure: file and SQLite
// (in dir), etcd, and PostgreSQL (DATABASE_URL's, else a server the run
// starts) when DATABASE_URL is set or PostgreSQL is installed. Each open gives
// a store of its own (its own File value, client or connection) over the
// same marks, as each replica of a resource has.
func markStores(r *runner, dir string) []markStore {
	stores := []markStore{
		{"file", func() (guard.MarkStore, func(), error) {
			f, err := markstore.NewFile(filepath.Join(dir, "files"))
			return f, func() {}, err
		}},
		{"sqlite", func() (guard.MarkStore, func(), error) {
			return openSQLStore("sqlite", filepath.Join(dir, "marks.db")+"?_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)")
		}},
		{"etcd", func() (guard.MarkStore, func(), error) {
			cli, err := r.env.newClient()
			if err != nil {
				return nil, nil, err
			}
			s, err := etcdio.NewMarkStore(cli, r.env.prefix("marks")+"/")
			if err != nil {
				cli.Close()
				return nil, nil, err
			}
			return s, func() { cli.Close() }, nil
		}},
	}
	if os.Getenv("DATABASE_URL") != "" || testserver.PostgresInstalled() {
		stores = append(stores, markStore{"postgres", func() (guard.MarkStore, func(), error) {
			url, err := r.env.startPostgres()
			if err != nil {
				return nil, nil, err
			}
			return openSQLStore("pgx", url)
		}})
	}
	return stores
}

func openSQLStore(driver, dsn string) (guard.MarkStore, func(), error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, nil, err
	}
	s, err := markstore.NewSQL(context.Background(), db, markstore.WithTable("disco_bench_marks"))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}

// runRaises raises the mark of one fresh scope, one higher token after the
// other, for cfg.duration, and records how long each raise took.
func runRaises(ctx context.Context, name string, s guard.MarkStore, cfg runCfg) *side {
	scope := fmt.Sprintf("/bench/raise/%d", time.Now().UnixNano())
	t := fencing.Token(0)
	return runCycles(ctx, name, cfg, func() error {
		t++
		return s.Raise(ctx, scope, t)
	})
}

// runCycles calls op, one call after the other, for cfg.duration, and
// records how long each successful call took.
func runCycles(ctx context.Context, lib string, cfg runCfg, op func() error) *side {
	sd := &side{Lib: lib}
	var errs errCount
	var cycles []time.Duration
	start := time.Now()
	for time.Since(start) < cfg.duration && ctx.Err() == nil {
		t0 := time.Now()
		if err := op(); err != nil {
			errs.add(err)
			continue
		}
		cycles = append(cycles, time.Since(t0))
	}
	sd.Window = time.Since(start)
	sd.Count = len(cycles)
	sd.cycles = cycles
	sd.Cycle = summarize(append([]time.Duration(nil), cycles...))
	sd.Wait = sd.Cycle // one call is one cycle
	sd.rate()
	errs.into(sd)
	return sd
}

// keyedGuardFleet: for each store, one keyed guard that uses the store
// alone (WithExclusiveStore, the in-memory fast path) against three keyed
// guards sharing it (the default: the replicas of one resource, each
// request arbitrated by the store), 64 goroutines admitting the token
// equal to the mark, spread over the guards at random. What the fleet
// costs per request is one store read, shared by the requests of a scope
// that arrive while one is in flight.
func keyedGuardFleet(ctx context.Context, r *runner) (*result, error) {
	const name = "keyed-guard-fleet"
	dir, err := os.MkdirTemp("", "disco-bench-fleet-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	scope := fmt.Sprintf("/bench/fleet/%d", time.Now().UnixNano())
	const tok = fencing.Token(42)
	var rows []*row
	var bars []bar
	for _, st := range markStores(r, dir) {
		var closers []func()
		keyed := func(opts ...guard.Option) (*guard.Keyed, error) {
			s, closeStore, err := st.open()
			if err != nil {
				return nil, fmt.Errorf("%s: %s store: %w", name, st.name, err)
			}
			closers = append(closers, closeStore)
			k := guard.NewKeyed(append(opts, guard.WithStore(s))...)
			return k, k.Check(scope, tok)
		}
		closeAll := func() {
			for _, c := range closers {
				c()
			}
		}
		one, err := keyed(guard.WithExclusiveStore())
		if err != nil {
			closeAll()
			return nil, err
		}
		var fleet [3]*guard.Keyed
		for i := range fleet {
			if fleet[i], err = keyed(); err != nil {
				closeAll()
				return nil, err
			}
		}
		r.logf("  %s: %s store, one exclusive keyed guard, %d goroutines ...", name, st.name, guardStoreGoroutines)
		oneSide := runGuard(ctx, "1 keyed guard, exclusive", guardStoreGoroutines, func(fencing.Token) error {
			return admitKeyed(one, scope, tok)
		}, r.cfg)
		r.logf("  %s: %s store, three guards sharing it ...", name, st.name)
		fleetSide, err := withEtcdLoad(ctx, r, func() *side {
			return runGuard(ctx, "3 guards sharing the store", guardStoreGoroutines, func(fencing.Token) error {
				return admitKeyed(fleet[mrand.IntN(len(fleet))], scope, tok)
			}, r.cfg)
		})
		closeAll()
		if err != nil {
			return nil, err
		}
		rows = append(rows, &row{Scenario: name + "/" + st.name, Contenders: guardStoreGoroutines, Baseline: oneSide.Lib,
			Unit: "ops/s", Disco: fleetSide, Base: oneSide})
		bars = append(bars, bar{st.name + ", 1 exclusive", oneSide.PerSec / 1e6}, bar{st.name + ", 3 shared", fleetSide.PerSec / 1e6})
	}
	return &result{Scenario: name, Rows: rows,
		chart: chart{title: fmt.Sprintf("keyed guards, %d goroutines, equal tokens", guardStoreGoroutines), yLabel: "million ops/s", bars: bars}}, nil
}

// admitKeyed admits tok of scope on k and is done at once.
func admitKeyed(k *guard.Keyed, scope string, tok fencing.Token) error {
	_, done, err := k.Admit(context.Background(), scope, tok)
	if err == nil {
		done()
	}
	return err
}

// withEtcdLoad runs f and, if etcd's metrics can be read, records in its
// side the etcd requests per operation made while it ran.
func withEtcdLoad(ctx context.Context, r *runner, f func() *side) (*side, error) {
	if r.env.metricsURL == "" {
		return f(), nil
	}
	before, err := scrape(ctx, r.env.metricsURL)
	if err != nil {
		return nil, err
	}
	sd := f()
	after, err := scrape(ctx, r.env.metricsURL)
	if err != nil {
		return nil, err
	}
	sd.Load = loadBetween(before, after, sd.Count)
	return sd, nil
}
