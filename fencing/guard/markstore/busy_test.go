package markstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// TestSQLiteBusyIsWaitedOut: an SQLite database opened as the package
// example opens it (no busy_timeout) answers SQLITE_BUSY to a write while
// another connection writes, and database/sql keeps several connections
// even for one *sql.DB. Concurrent requests of legitimate tokens, from one
// replica or two, are all accepted: the store waits out a busy database
// (within the request's context) rather than fail the request.
func TestSQLiteBusyIsWaitedOut(t *testing.T) {
	for _, replicas := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", replicas), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "resource.db")
			var guards []*guard.Keyed
			for range replicas {
				db, err := sql.Open("sqlite", file)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				s, err := markstore.NewSQL(context.Background(), db)
				if err != nil {
					t.Fatal(err)
				}
				guards = append(guards, guard.NewKeyed(guard.WithStore(s)))
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for i := range 8 {
				wg.Go(func() {
					scope := fmt.Sprintf("/locks/%d", i)
					for tok := fencing.Token(1); tok <= 30; tok++ {
						if err := guards[int(tok)%replicas].Check(scope, tok); err != nil {
							errs <- fmt.Errorf("scope %s, token %d: %w", scope, tok, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			n := 0
			for err := range errs {
				if n++; n <= 2 {
					t.Errorf("a legitimate token rejected: %v", err)
				}
			}
			if n > 2 {
				t.Errorf("... %d of 8 writers had a token rejected", n)
			}
		})
	}
}
