package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/testserver"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

// databases are the databases the story is told on: SQLite always,
// PostgreSQL when its server binaries are installed (a throwaway server).
func databases(t *testing.T) map[string]func(t *testing.T) database {
	return map[string]func(t *testing.T) database{
		"SQLite":     func(t *testing.T) database { return sqliteDB(filepath.Join(t.TempDir(), "resource.db")) },
		"PostgreSQL": func(t *testing.T) database { return postgresDB(testserver.Postgres(t)) },
	}
}

func TestZombieWriteRejectedByDatabase(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			d := open(t)
			storytest.NoLeaks(t)
			o, story := storytest.TellWith(t, run, d)

			if o.TokenB <= o.TokenA {
				t.Errorf("B's token %d not above A's %d", o.TokenB, o.TokenA)
			}
			if !errors.Is(o.ZombieErr, fencing.ErrTokenStale) {
				t.Errorf("zombie write: %v, want an error wrapping ErrTokenStale", o.ZombieErr)
			}

			// Look at the row ourselves rather than trusting the story.
			ctx := context.Background()
			db, err := openDB(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			body, tok, err := read(ctx, doc{db: db, id: o.DocID})
			if err != nil {
				t.Fatal(err)
			}
			if body != valueB || tok != o.TokenB {
				t.Errorf("row = (%q, %d), want B's (%q, %d)", body, tok, valueB, o.TokenB)
			}
			storytest.Mentions(t, "story", story, "Lost", "rejected by the database", "ended as promised")
		})
	}
}

// TestFencedWrite checks the single-statement check-and-write on its own.
func TestFencedWrite(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			db, err := openDB(ctx, open(t))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			d, err := newDoc(ctx, db, "fenced")
			if err != nil {
				t.Fatal(err)
			}
			steps := []struct {
				token fencing.Token
				stale bool
			}{{5, false}, {5, false}, {9, false}, {7, true}, {9, false}, {10, false}, {1, true}}
			for _, s := range steps {
				err := write(ctx, d, "v"+s.token.String(), s.token)
				if s.stale != errors.Is(err, fencing.ErrTokenStale) || (!s.stale && err != nil) {
					t.Fatalf("write with token %d: %v (want stale: %v)", s.token, err, s.stale)
				}
			}
			if body, tok, err := read(ctx, d); err != nil || body != "v10" || tok != 10 {
				t.Fatalf("row = (%q, %d, %v), want (v10, 10)", body, tok, err)
			}
		})
	}
}
