package fencetest

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
	"github.com/ahrtr/disco/internal/testserver"
)

// TestMain serves etcd from a child process for the etcd mark store, and
// checks that no goroutine outlives the tests.
func TestMain(m *testing.M) { etcdtest.Main(m) }

// storeKind makes fresh mark stores of one kind: each call of stores' open
// is one configuration's store, empty, and open() opens it again as a
// restarted process would.
type storeKind struct {
	name string
	// fresh returns the opener of a new, empty store.
	fresh func(t *testing.T) (open func() guard.MarkStore)
}

// markStores are the stores a guard can keep its marks in. PostgreSQL is a
// throwaway server for t, each store a table of its own.
func markStores(t *testing.T) []storeKind {
	ctx := context.Background()
	sqlStore := func(t *testing.T, db *sql.DB, opts ...markstore.SQLOption) func() guard.MarkStore {
		return func() guard.MarkStore {
			s, err := markstore.NewSQL(ctx, db, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	openDB := func(t *testing.T, driver, dsn string) *sql.DB {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	pg := openDB(t, "pgx", testserver.Postgres(t))
	var tables atomic.Int64
	return []storeKind{
		{"file", func(t *testing.T) func() guard.MarkStore {
			dir := t.TempDir()
			return func() guard.MarkStore {
				s, err := markstore.NewFile(dir)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}},
		{"SQLite", func(t *testing.T) func() guard.MarkStore {
			db := openDB(t, "sqlite", filepath.Join(t.TempDir(), "marks.db")+"?_pragma=busy_timeout(5000)")
			return sqlStore(t, db)
		}},
		{"PostgreSQL", func(t *testing.T) func() guard.MarkStore {
			return sqlStore(t, pg, markstore.WithTable(fmt.Sprintf("marks_%d", tables.Add(1))))
		}},
		{"etcd", func(t *testing.T) func() guard.MarkStore {
			cli := etcdtest.NewClient(t)
			// One etcd serves every test of the binary (and every -count):
			// a prefix of its own per store.
			prefix := fmt.Sprintf("/fencetest/%s/%d/", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().UnixNano())
			return func() guard.MarkStore {
				s, err := etcdio.NewMarkStore(cli, prefix)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
		}},
	}
}

// guardKind is one way to put a guard in front of a kv: start builds it on
// a store as a newly started process would.
type guardKind struct {
	name  string
	keyed bool
	fence func(store guard.MarkStore) func(http.Handler) http.Handler
}

var guardKinds = []guardKind{
	{"New", false, func(s guard.MarkStore) func(http.Handler) http.Handler {
		return guard.New(guard.WithStore(s)).HTTPMiddleware
	}},
	{"NewKeyed", true, func(s guard.MarkStore) func(http.Handler) http.Handler {
		k := guard.NewKeyed(guard.WithStore(s))
		return func(h http.Handler) http.Handler { return k.HTTPMiddleware(scopeOfPath, h) }
	}},
}

// onStore is the Resource of a kv behind a guard of kind on the store open
// opens: each start (and restart) builds a new guard on a newly opened
// store, in front of the same data, and a second replica does the same on
// the same store.
func onStore(kind guardKind, open func() guard.MarkStore) Resource {
	data := newKV()
	start := func() http.Handler { return data.handler(kind.fence(open())) }
	r := HTTPHandler(start, kvAPI)
	two := HTTPHandler(start, kvAPI)
	r.Keyed, r.Replica = kind.keyed, &two
	return r
}

// TestGuardsOnStores: guard.New and guard.NewKeyed on every mark store
// pass every history, the restart included, and two replicas on one store
// fence as one (guards on a store compare with it; issue 27).
func TestGuardsOnStores(t *testing.T) {
	for _, store := range markStores(t) {
		for _, kind := range guardKinds {
			t.Run(kind.name+"/"+store.name, func(t *testing.T) {
				Run(t, onStore(kind, store.fresh(t)))
			})
		}
	}
}

// TestExclusiveStoreReplicas: two guards that each assert an exclusive
// store (guard.WithExclusiveStore) but share one answer a token equal to
// their own mark from memory, so a zombie whose token is below the other
// replica's mark gets in: the kit catches it in Replicas, as the option's
// doc warns.
func TestExclusiveStoreReplicas(t *testing.T) {
	open := markStores(t)[0].fresh(t) // the file store
	data := newKV()
	start := func() http.Handler {
		return data.handler(guard.New(guard.WithStore(open()), guard.WithExclusiveStore()).HTTPMiddleware)
	}
	r := HTTPHandler(start, kvAPI)
	two := HTTPHandler(start, kvAPI)
	r.Replica = &two
	got := runRecorded(t, r, "Replicas")
	expect(t, got, map[string][]string{
		"Replicas": {"through replica 1, which never saw token", "do not share their mark"},
	})
}
