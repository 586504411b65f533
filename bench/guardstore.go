package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// guardStoreGoroutines is how many goroutines present the same token to a
// keyed guard in the keyed-guard-store scenario.
const guardStoreGoroutines = 64

// storedGuardGoal: a keyed guard on a store, with equal tokens, within this
// factor of an in-memory keyed guard's throughput.
const storedGuardGoal = 2.0

// keyedGuardStore: (1) a Keyed guard on a file store against an in-memory
// Keyed guard, 64 goroutines admitting the token equal to the mark (the
// steady state: no store access); (2) the cost of one mark raise for each
// store: file, SQLite, etcd, and PostgreSQL when DATABASE_URL is set.
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
		return func(fencing.Token) error {
			_, done, err := k.Admit(context.Background(), scope, tok)
			if err == nil {
				done()
			}
			return err
		}
	}
	r.logf("  %s: in-memory keyed guard, %d goroutines ...", name, guardStoreGoroutines)
	mem := guard.NewKeyed()
	if err := mem.Check(scope, tok); err != nil {
		return nil, err
	}
	memSide := runGuard(ctx, "keyed in-memory", guardStoreGoroutines, admit(mem), r.cfg)
	r.logf("  %s: keyed guard on a file store, %d goroutines ...", name, guardStoreGoroutines)
	stored := guard.NewKeyed(guard.WithStore(file))
	if err := stored.Check(scope, tok); err != nil {
		return nil, err
	}
	storedSide := runGuard(ctx, "keyed on file store", guardStoreGoroutines, admit(stored), r.cfg)
	steady := &row{Scenario: name, Contenders: guardStoreGoroutines, Baseline: memSide.Lib, Unit: "ops/s",
		Disco: storedSide, Base: memSide}
	ratio := ratioOf(memSide.PerSec, storedSide.PerSec)
	steady.Goals = []goal{judge(fmt.Sprintf("within %gx of in-memory keyed", storedGuardGoal),
		storedSide.PerSec > 0 && ratio <= storedGuardGoal,
		fmt.Sprintf("%.0f vs %.0f ops/s (in-memory/stored %.2f)", storedSide.PerSec, memSide.PerSec, ratio))}
	rows := []*row{steady}
	bars := []bar{{memSide.Lib, memSide.PerSec}, {storedSide.Lib, storedSide.PerSec}}

	stores := []struct {
		name string
		open func() (guard.MarkStore, func(), error)
	}{
		{"file", func() (guard.MarkStore, func(), error) { return file, func() {}, nil }},
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
	if url := os.Getenv("DATABASE_URL"); url != "" {
		stores = append(stores, struct {
			name string
			open func() (guard.MarkStore, func(), error)
		}{"postgres", func() (guard.MarkStore, func(), error) { return openSQLStore("pgx", url) }})
	}
	for _, st := range stores {
		r.logf("  %s: mark raises, %s store ...", name, st.name)
		s, closeStore, err := st.open()
		if err != nil {
			return nil, fmt.Errorf("%s: %s store: %w", name, st.name, err)
		}
		var before snapshot
		if r.env.metricsURL != "" {
			if before, err = scrape(ctx, r.env.metricsURL); err != nil {
				return nil, err
			}
		}
		sd := runRaises(ctx, st.name+" store raise", s, r.cfg)
		closeStore()
		if r.env.metricsURL != "" { // etcd requests per raise (0 but for etcd's store)
			after, err := scrape(ctx, r.env.metricsURL)
			if err != nil {
				return nil, err
			}
			sd.Load = loadBetween(before, after, sd.Count)
		}
		rows = append(rows, &row{Scenario: name + "/raise-" + st.name, Contenders: 1, Unit: "raises/s", Latency: "cycle", Disco: sd})
	}
	return &result{Scenario: name, Rows: rows,
		chart: chart{title: fmt.Sprintf("keyed guard, %d goroutines, equal tokens", guardStoreGoroutines), yLabel: "million ops/s", bars: bars}}, nil
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
	sd := &side{Lib: name}
	var errs errCount
	scope := fmt.Sprintf("/bench/raise/%d", time.Now().UnixNano())
	var cycles []time.Duration
	start := time.Now()
	for t := fencing.Token(1); time.Since(start) < cfg.duration && ctx.Err() == nil; t++ {
		t0 := time.Now()
		if err := s.Raise(ctx, scope, t); err != nil {
			errs.add(err)
			continue
		}
		cycles = append(cycles, time.Since(t0))
	}
	sd.Window = time.Since(start)
	sd.Count = len(cycles)
	sd.cycles = cycles
	sd.Cycle = summarize(append([]time.Duration(nil), cycles...))
	sd.Wait = sd.Cycle // one raise is one call
	sd.rate()
	errs.into(sd)
	return sd
}
