package markstore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
)

// TestNilContext: each call of a store, and NewSQL, given a nil context
// returns an error that says "nil context" and wraps ErrInvalidArgument
// (and so primitives.ErrInvalidArgument), never panics, and writes
// nothing: no mark, no file, no table, no row in the caller's transaction.
// On a File, on SQLite and on PostgreSQL.
func TestNilContext(t *testing.T) {
	var nilCtx context.Context
	ctx := context.Background()
	// Each kind of store: setup runs once for the kind (a PostgreSQL
	// server), open once for each call (a fresh store).
	kinds := []struct {
		name  string
		setup func(t *testing.T) (open func(t *testing.T) (guard.RaiseLoader, *sql.DB, string))
	}{
		{"File", func(*testing.T) func(*testing.T) (guard.RaiseLoader, *sql.DB, string) {
			return func(t *testing.T) (guard.RaiseLoader, *sql.DB, string) {
				dir := t.TempDir()
				f, err := markstore.NewFile(dir)
				if err != nil {
					t.Fatal(err)
				}
				return f, nil, dir
			}
		}},
		{"SQLite", func(*testing.T) func(*testing.T) (guard.RaiseLoader, *sql.DB, string) {
			return func(t *testing.T) (guard.RaiseLoader, *sql.DB, string) {
				return openSQLFor(t, "sqlite", filepath.Join(t.TempDir(), "marks.db")+"?_pragma=busy_timeout(5000)&_txlock=immediate")
			}
		}},
		{"Postgres", func(t *testing.T) func(*testing.T) (guard.RaiseLoader, *sql.DB, string) {
			dsn := testserver.Postgres(t)
			return func(t *testing.T) (guard.RaiseLoader, *sql.DB, string) {
				return openSQLFor(t, "pgx", dsn)
			}
		}},
	}
	calls := []struct {
		name    string
		sqlOnly bool
		call    func(s guard.RaiseLoader, db *sql.DB) error
	}{
		{"Load", false, func(s guard.RaiseLoader, _ *sql.DB) error { _, err := s.Load(nilCtx, "/a"); return err }},
		{"Raise", false, func(s guard.RaiseLoader, _ *sql.DB) error { return s.Raise(nilCtx, "/a", 5) }},
		{"RaiseLoad", false, func(s guard.RaiseLoader, _ *sql.DB) error { _, err := s.RaiseLoad(nilCtx, "/a", 5); return err }},
		{"CheckTx", true, func(s guard.RaiseLoader, db *sql.DB) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback() //nolint:errcheck
			if err := s.(*markstore.SQL).CheckTx(nilCtx, tx, "/a", 5); err != nil {
				// The transaction is still the caller's to commit:
				// commit it, so that a row it wrote would show.
				if cerr := tx.Commit(); cerr != nil {
					return errors.New("commit after the check: " + cerr.Error())
				}
				return err
			}
			return nil
		}},
		{"NewSQL", true, func(_ guard.RaiseLoader, db *sql.DB) error {
			_, err := markstore.NewSQL(nilCtx, db, markstore.WithTable("nil_ctx_marks"))
			return err
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			open := k.setup(t)
			for _, c := range calls {
				if c.sqlOnly && k.name == "File" {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					s, db, dir := open(t)
					var before []os.DirEntry
					if dir != "" {
						before, _ = os.ReadDir(dir)
					}
					var panicked any
					err := func() error {
						defer func() { panicked = recover() }()
						return c.call(s, db)
					}()
					if panicked != nil {
						// database/sql panics on a nil context with the
						// DB's mutex held: every later call of db,
						// Close too, would hang. It is left open.
						t.Fatalf("panicked: %v", panicked)
					}
					if db != nil {
						defer db.Close()
					}
					if !errors.Is(err, markstore.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
						t.Fatalf("error %v, want one saying nil context and wrapping markstore.ErrInvalidArgument", err)
					}
					if m, err := s.Load(ctx, "/a"); err != nil || m != 0 {
						t.Errorf("the mark of /a is %d (%v) after the call, want 0", m, err)
					}
					if dir != "" {
						if after, _ := os.ReadDir(dir); len(after) != len(before) {
							t.Errorf("the directory holds %d entries after the call, %d before", len(after), len(before))
						}
					}
					if c.name == "NewSQL" {
						var n int
						if err := db.QueryRowContext(ctx, `SELECT count(*) FROM nil_ctx_marks`).Scan(&n); err == nil {
							t.Errorf("NewSQL(nil) created its table")
						}
					}
				})
			}
		})
	}
}

// openSQLFor opens a fresh store in the database dsn: a table of its own,
// so that the stores of one PostgreSQL server are apart. The database is
// the caller's to close.
func openSQLFor(t *testing.T, driver, dsn string) (guard.RaiseLoader, *sql.DB, string) {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	table := "marks_" + strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	s, err := markstore.NewSQL(context.Background(), db, markstore.WithTable(table[:min(len(table), 63)]))
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return s, db, "" // the caller closes db
}
