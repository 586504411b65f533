package markstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/internal/testserver"
)

// TestNewSQLLeavesNoErrorInPostgresLog: NewSQL, on a new table and on an
// existing one, makes PostgreSQL log no ERROR: a resource that starts
// often must not fill its DBA's log with errors. (Its scopes are still
// encoded there: TestAnyScope.)
func TestNewSQLLeavesNoErrorInPostgresLog(t *testing.T) {
	srv := testserver.PostgresServerFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 2 { // the table is new, then it exists
		if _, err := markstore.NewSQL(ctx, db); err != nil {
			t.Fatalf("NewSQL #%d: %v", i+1, err)
		}
	}
	// The server logs an error before it answers the statement, so a line
	// it logs after NewSQL returned comes after any line NewSQL caused.
	marker := fmt.Sprintf("marker-%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, `DO $$BEGIN RAISE WARNING '`+marker+`'; END$$`); err != nil {
		t.Fatal(err)
	}
	var log string
	for {
		if log = srv.Log(); strings.Contains(log, marker) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the marker never reached the server's log:\n%s", log)
		case <-time.After(10 * time.Millisecond):
		}
	}
	log = log[:strings.Index(log, marker)]
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "ERROR:") {
			t.Errorf("PostgreSQL logged, during NewSQL: %s", line)
		}
	}
}

// TestNewSQLConcurrently: the replicas of a resource that start at once on
// a fresh database each make a store: NewSQL succeeds in every one of
// them, though they all create the table at the same time.
func TestNewSQLConcurrently(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		newSQLConcurrently(t, "sqlite", filepath.Join(t.TempDir(), "marks.db"))
	})
	t.Run("Postgres", func(t *testing.T) { newSQLConcurrently(t, "pgx", testserver.Postgres(t)) })
}

func newSQLConcurrently(t *testing.T, driver, dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const replicas = 8
	for round := range 5 {
		table := fmt.Sprintf("marks_%d", round)
		errs := make(chan error, replicas)
		for range replicas {
			go func() {
				db, err := sql.Open(driver, dsn)
				if err != nil {
					errs <- err
					return
				}
				defer db.Close()
				_, err = markstore.NewSQL(ctx, db, markstore.WithTable(table))
				errs <- err
			}()
		}
		for range replicas {
			if err := <-errs; err != nil {
				t.Errorf("NewSQL of one of %d replicas starting at once, table %s: %v", replicas, table, err)
			}
		}
	}
}
