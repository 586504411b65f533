package markstore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/fencing/guard/storetest"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openFile(dir string) (guard.MarkStore, func(), error) {
	s, err := markstore.NewFile(dir)
	return s, func() {}, err
}

func openSQL(driver, dsn string) (guard.MarkStore, func(), error) {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, nil, err
	}
	s, err := markstore.NewSQL(context.Background(), db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}

func openSQLite(file string) (guard.MarkStore, func(), error) {
	return openSQL("sqlite", file+"?_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)")
}

func openPostgres(dsn string) (guard.MarkStore, func(), error) { return openSQL("pgx", dsn) }

func TestFileLaws(t *testing.T) {
	s, _, err := openFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, s, "/file")
}

func TestFileCrash(t *testing.T) {
	storetest.Crash(t, filepath.Join(t.TempDir(), "marks"), nil, openFile)
}

func TestSQLiteLaws(t *testing.T) {
	s, closeDB, err := openSQLite(filepath.Join(t.TempDir(), "marks.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	storetest.Run(t, s, "/sqlite")
}

func TestSQLiteFleet(t *testing.T) {
	storetest.Fleet(t, filepath.Join(t.TempDir(), "marks.db"), nil, openSQLite)
}

func TestSQLiteCrash(t *testing.T) {
	storetest.Crash(t, filepath.Join(t.TempDir(), "marks.db"), nil, openSQLite)
}

func TestPostgres(t *testing.T) {
	if storetest.IsChild() { // a child: the parent's server is in its arg
		t.Run("Crash", func(t *testing.T) { storetest.Crash(t, "", nil, openPostgres) })
		t.Run("Fleet", func(t *testing.T) { storetest.Fleet(t, "", nil, openPostgres) })
		return
	}
	dsn := testserver.Postgres(t)
	t.Run("Laws", func(t *testing.T) {
		s, closeDB, err := openPostgres(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB()
		storetest.Run(t, s, "/pg")
	})
	t.Run("Crash", func(t *testing.T) {
		storetest.Crash(t, dsn, nil, openPostgres)
	})
	t.Run("Fleet", func(t *testing.T) {
		storetest.Fleet(t, dsn, nil, openPostgres)
	})
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := markstore.NewFile(""); err == nil {
		t.Error("NewFile(\"\") succeeded")
	}
	if _, err := markstore.NewSQL(ctx, nil); err == nil {
		t.Error("NewSQL(nil) succeeded")
	}
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, bad := range []string{"", "1abc", "a;DROP TABLE x", "a b"} {
		if _, err := markstore.NewSQL(ctx, db, markstore.WithTable(bad)); err == nil {
			t.Errorf("table %q accepted", bad)
		}
	}
}

// TestZeroStores: a nil or zero *File or *SQL (a NewFile or NewSQL error
// ignored, a store declared but never made) is bad input: each method
// returns an error wrapping primitives.ErrInvalidArgument, never a panic,
// and a zero File writes nothing (it has no directory: it would write to
// the process's working directory).
func TestZeroStores(t *testing.T) {
	ctx := context.Background()
	t.Chdir(t.TempDir())
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	type store interface {
		guard.RaiseLoader
	}
	for name, s := range map[string]store{
		"nil *File": (*markstore.File)(nil),
		"zero File": &markstore.File{},
		"nil *SQL":  (*markstore.SQL)(nil),
		"zero SQL":  &markstore.SQL{},
	} {
		t.Run(name, func(t *testing.T) {
			mustInvalid := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, primitives.ErrInvalidArgument) {
					t.Errorf("%s on a %s: %v, want an error wrapping primitives.ErrInvalidArgument", what, name, err)
				}
			}
			call := func(what string, f func() error) {
				t.Helper()
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s on a %s panicked: %v", what, name, r)
					}
				}()
				mustInvalid(what, f())
			}
			call("Load", func() error { _, err := s.Load(ctx, "/a"); return err })
			call("Raise", func() error { return s.Raise(ctx, "/a", 5) })
			call("RaiseLoad", func() error { _, err := s.RaiseLoad(ctx, "/a", 5); return err })
			if q, ok := s.(*markstore.SQL); ok {
				call("CheckTx", func() error { return q.CheckTx(ctx, tx, "/a", 5) })
			}
		})
	}
	if ents, err := os.ReadDir("."); err != nil || len(ents) != 0 {
		t.Errorf("the working directory holds %d files (%v) after calls on zero stores", len(ents), err)
	}
}
