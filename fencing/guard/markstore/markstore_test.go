package markstore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/fencing/guard/storetest"
	"github.com/ahrtr/disco/internal/testserver"
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
