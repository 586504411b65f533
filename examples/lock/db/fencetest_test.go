package main

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing/fencetest"
)

// rowResource is the story's fenced row as the resource test kit sees it:
// each write is write's single UPDATE with the request's token, each read
// read's SELECT. A restart closes the database handle and opens a new one
// (a new process); the replica is another handle on the same database.
type rowResource struct {
	d  database
	id string

	mu sync.Mutex
	db *sql.DB
}

func (r *rowResource) doc() doc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return doc{db: r.db, id: r.id}
}

func (r *rowResource) open(ctx context.Context) error {
	db, err := openDB(ctx, r.d)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := r.db
	r.db = db
	r.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

func (r *rowResource) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.db != nil {
		r.db.Close()
		r.db = nil
	}
}

func (r *rowResource) resource() fencetest.Resource {
	return fencetest.Resource{
		Write: func(ctx context.Context, req fencetest.Request) error {
			t, err := req.ParsedToken() // the client passes its grant's token as is
			if err != nil {
				return err
			}
			return write(ctx, r.doc(), req.Value, t)
		},
		Read: func(ctx context.Context, _ fencetest.Request) (string, error) {
			body, _, err := read(ctx, r.doc())
			return body, err
		},
		Restart: r.open,
	}
}

// TestRowFences: the story's row, on SQLite and on PostgreSQL, passes the
// resource test kit, across a restart and through two replicas (two
// processes on one database: the check is in the database, so they fence
// as one).
func TestRowFences(t *testing.T) {
	for name, open := range databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			d := open(t)
			id := "fencetest-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			one, two := &rowResource{d: d, id: id}, &rowResource{d: d, id: id}
			for _, r := range []*rowResource{one, two} {
				if err := r.open(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(r.close)
			}
			if _, err := newDoc(ctx, one.doc().db, id); err != nil {
				t.Fatal(err)
			}
			res, replica := one.resource(), two.resource()
			res.Replica = &replica
			fencetest.Run(t, res)
		})
	}
}
