package markstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/internal/testserver"
)

// anyScopes are scopes a keyed guard takes (any bytes, as the scope
// header carries them) that are not text to every database: NUL bytes,
// invalid UTF-8, and scopes close to each other and to plain ones,
// among them the form PostgreSQL's table stores "/nul\x00a" in (see
// markstore.SQL) and scopes that start with its prefix.
var anyScopes = []string{
	"/nul\x00a", "/nul\x00b", "/nul", "\x00", "\x00\x00",
	"/bad\xff", "/bad\xfe", "/bad", "\xc3", "\xc3\xbc",
	"\x7fb64:L251bABh", "\x7fb64:", "\x7fb64", "\x7fb64:\x00",
}

// TestAnyScope: each store keeps a mark per scope for every scope a keyed
// guard takes, as the in-memory marks do. Raising one scope leaves the
// others alone, and a guard on the store rejects a token below a scope's
// mark (rather than answering 503 for every request of the scope).
func TestAnyScope(t *testing.T) {
	t.Run("File", func(t *testing.T) {
		s, _, err := openFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		anyScope(t, s)
	})
	t.Run("SQLite", func(t *testing.T) {
		s, closeDB, err := openSQLite(filepath.Join(t.TempDir(), "marks.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB()
		anyScope(t, s)
	})
	t.Run("Postgres", func(t *testing.T) {
		dsn := testserver.Postgres(t)
		s, closeDB, err := openPostgres(dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer closeDB()
		anyScope(t, s)
		// CheckTx, in the resource's transaction, shares those marks.
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		q, err := markstore.NewSQL(context.Background(), db)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck
		if err := q.CheckTx(context.Background(), tx, anyScopes[0], 99); !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("CheckTx(%q, 99) below the mark 100: %v, want stale", anyScopes[0], err)
		}
	})
}

func anyScope(t *testing.T, s guard.MarkStore, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scopes := append(append([]string(nil), anyScopes...), extra...)
	for i, scope := range scopes {
		if err := s.Raise(ctx, scope, fencing.Token(10+i)); err != nil {
			t.Fatalf("Raise(%q, %d): %v", scope, 10+i, err)
		}
	}
	for i, scope := range scopes {
		if m, err := s.Load(ctx, scope); err != nil || m != fencing.Token(10+i) {
			t.Fatalf("Load(%q) = %d, %v; want %d", scope, m, err, 10+i)
		}
	}
	k := guard.NewKeyed(guard.WithStore(s))
	for i, scope := range scopes {
		if err := k.Check(scope, fencing.Token(9+i)); !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("a guard on the store: Check(%q, %d) below the mark %d: %v, want stale", scope, 9+i, 10+i, err)
		}
		if err := k.Check(scope, fencing.Token(100+i)); err != nil {
			t.Fatalf("a guard on the store: Check(%q, %d): %v", scope, 100+i, err)
		}
	}
	if rl, ok := s.(guard.RaiseLoader); ok {
		for i, scope := range scopes {
			if m, err := rl.RaiseLoad(ctx, scope, 1); err != nil || m != fencing.Token(100+i) {
				t.Fatalf("RaiseLoad(%q, 1) = %d, %v; want %d", scope, m, err, 100+i)
			}
		}
	}
}

// TestSQLKeepsExistingRows: a table written by an earlier version (scopes
// stored as they are) keeps its marks: the store finds a row of a plain
// scope under the same scope, and on SQLite a row of any scope.
func TestSQLKeepsExistingRows(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		keepsRows(t, "sqlite", filepath.Join(t.TempDir(), "marks.db"))
	})
	t.Run("Postgres", func(t *testing.T) { keepsRows(t, "pgx", testserver.Postgres(t)) })
}

func keepsRows(t *testing.T, driver, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := map[string]int64{"/locks/a": 7, "": 3, "/b ü% 'x'": 11, "\x7f": 4, "~": 5}
	if driver == "sqlite" { // SQLite takes any bytes as text: its rows are any scope's
		old["/nul\x00a"], old["/bad\xff"] = 8, 9
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+markstore.DefaultTable+` (scope TEXT PRIMARY KEY, mark BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for scope, m := range old {
		if _, err := db.ExecContext(ctx, `INSERT INTO `+markstore.DefaultTable+` (scope, mark) VALUES ($1, $2)`, scope, m); err != nil {
			t.Fatal(err)
		}
	}
	s, err := markstore.NewSQL(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for scope, m := range old {
		if got, err := s.Load(ctx, scope); err != nil || got != fencing.Token(m) {
			t.Errorf("Load(%q) = %d, %v; want the existing row's %d", scope, got, err, m)
		}
		if got, err := s.RaiseLoad(ctx, scope, 1); err != nil || got != fencing.Token(m) {
			t.Errorf("RaiseLoad(%q, 1) = %d, %v; want the existing row's %d", scope, got, err, m)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+markstore.DefaultTable).Scan(&n); err != nil || n != len(old) {
		t.Errorf("the table holds %d rows (%v) after loads and raises of its scopes, want %d", n, err, len(old))
	}
}
