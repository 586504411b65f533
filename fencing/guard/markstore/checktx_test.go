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
	"github.com/ahrtr/disco/primitives"
)

// TestCheckTx: the check inside the resource's own transaction, with two
// replicas (two *sql.DB) of a resource on SQLite and on PostgreSQL.
func TestCheckTx(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "resource.db")
		checkTx(t, "sqlite", file+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	})
	t.Run("Postgres", func(t *testing.T) { checkTx(t, "pgx", testserver.Postgres(t)) })
}

func checkTx(t *testing.T, driver, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func() (*sql.DB, *markstore.SQL) {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := markstore.NewSQL(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS docs (id TEXT PRIMARY KEY, body TEXT)`); err != nil {
			t.Fatal(err)
		}
		return db, s
	}
	dbA, a := open()
	dbB, b := open()
	const scope = "/locks/doc"
	// write is a replica's request: the check, then the write it protects,
	// committed together.
	write := func(db *sql.DB, s *markstore.SQL, tok fencing.Token, body string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback() //nolint:errcheck
		if err := s.CheckTx(ctx, tx, scope, tok); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO docs (id, body) VALUES ('d', $1) ON CONFLICT (id) DO UPDATE SET body = excluded.body`, body); err != nil {
			t.Fatal(err)
		}
		return tx.Commit()
	}
	body := func() string {
		var s string
		if err := dbA.QueryRowContext(ctx, `SELECT body FROM docs WHERE id = 'd'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := write(dbA, a, 5, "five"); err != nil {
		t.Fatal(err)
	}
	if err := write(dbB, b, 5, "five again"); err != nil {
		t.Fatalf("an equal token on the other replica: %v", err)
	}
	if err := write(dbB, b, 7, "seven"); err != nil {
		t.Fatal(err)
	}
	if err := write(dbA, a, 5, "zombie"); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("token 5 after 7 committed on the other replica: %v, want stale", err)
	}
	if got := body(); got != "seven" {
		t.Fatalf("body %q, want the write of token 7", got)
	}

	// A transaction that passed the check holds the scope until it ends: a
	// higher token's check on the other replica waits for its commit.
	txA, err := dbA.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback() //nolint:errcheck
	if err := a.CheckTx(ctx, txA, scope, 8); err != nil {
		t.Fatal(err)
	}
	higher := make(chan error, 1)
	go func() { higher <- write(dbB, b, 9, "nine") }()
	select {
	case err := <-higher:
		t.Fatalf("token 9's transaction ended while token 8's was open: %v", err)
	case <-time.After(100 * time.Millisecond): // a failure only if it is early; never a pass by luck
	}
	if _, err := txA.ExecContext(ctx, `UPDATE docs SET body = 'eight' WHERE id = 'd'`); err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-higher; err != nil {
		t.Fatalf("token 9 after token 8 committed: %v", err)
	}
	if got := body(); got != "nine" {
		t.Fatalf("body %q, want the write of token 9, which came after 8", got)
	}

	// A rolled-back check leaves the mark: the mark commits with the writes.
	tx, err := dbA.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CheckTx(ctx, tx, scope, 100); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if m, err := b.Load(ctx, scope); err != nil || m != 9 {
		t.Fatalf("mark %d, %v after a rolled-back check of 100; want 9", m, err)
	}
	// A guard on the store in front of the resource shares the marks.
	if err := guard.NewKeyed(guard.WithStore(b)).Check(scope, 8); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("a guard on the store: Check(8) below 9: %v, want stale", err)
	}
	if err := a.CheckTx(ctx, nil, scope, 10); !errors.Is(err, markstore.ErrInvalidArgument) {
		t.Errorf("nil tx: %v", err)
	}
	tx, err = dbA.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if err := a.CheckTx(ctx, tx, scope, 0); !errors.Is(err, fencing.ErrNoToken) {
		t.Errorf("token 0: %v", err)
	}
}

// Bad input to a store is an error every disco caller recognises:
// primitives.ErrInvalidArgument, as the backends' are.
func TestBadInputWrapsInvalidArgument(t *testing.T) {
	if _, err := markstore.NewFile(""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("NewFile(\"\") = %v, want an error wrapping primitives.ErrInvalidArgument", err)
	}
	if _, err := markstore.NewSQL(context.Background(), nil); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("NewSQL(nil) = %v, want an error wrapping primitives.ErrInvalidArgument", err)
	}
}
