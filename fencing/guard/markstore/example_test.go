package markstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/markstore"
)

// A guard whose marks live in a SQL table: here SQLite (driver
// modernc.org/sqlite); with PostgreSQL, open the *sql.DB with pgx's stdlib
// driver ("pgx") instead. A guard rebuilt on the same table after a restart
// rejects the token a zombie still holds.
func ExampleNewSQL() {
	dir, _ := os.MkdirTemp("", "marks-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", filepath.Join(dir, "resource.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	store, err := markstore.NewSQL(ctx, db)
	if err != nil {
		fmt.Println(err)
		return
	}

	g := guard.New(guard.WithStore(store))
	fmt.Println(g.Check(7)) // raised to 7 in the table before it is accepted

	restarted := guard.New(guard.WithStore(store))
	fmt.Println(restarted.Check(6))

	// Output:
	// <nil>
	// guard: token 6 is below the mark 7: fencing: stale token
}
