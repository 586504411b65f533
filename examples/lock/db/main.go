// Command db shows a fencing token protecting a SQL database directly, with
// no guard process in between: the token is stored in the protected row and
// every write checks it inside the database, in the same statement.
//
// The story: owner A takes a lock and writes with its token. A is then paused
// (think of a long garbage-collection pause) for longer than its lease, so its
// hold ends; B takes the lock with a higher token and writes. When A wakes up
// it still believes it holds the lock and writes with its old token: the
// database rejects that write, and the row keeps B's value.
//
// Run it with
//
//	go run ./examples/lock/db
//
// It starts an embedded etcd member (set ETCD_ENDPOINTS to use a real
// cluster) and, by default, an embedded SQLite database (pure Go,
// modernc.org/sqlite) in a temporary directory that is removed at the end.
// Set DATABASE_URL to use PostgreSQL instead (through pgx's database/sql
// driver), for example
//
//	DATABASE_URL=postgres://user:pass@localhost:5432/db?sslmode=disable go run ./examples/lock/db
//
// It then creates the table documents if it does not exist, and tells the
// story on a row of its own that it deletes at the end. The fenced write is
// the same single statement on both databases. It exits 0 only if the story
// ended as promised.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	_ "modernc.org/sqlite"             // registers the "sqlite" driver

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/fencing"
)

func main() { story.Main("db example", mainErr) }

func mainErr(ctx context.Context) error {
	return story.WithEtcd(ctx, os.Stdout, story.ShowAddress, func(ctx context.Context, etcd story.Etcd) error {
		if url := os.Getenv("DATABASE_URL"); url != "" {
			o, err := run(ctx, os.Stdout, etcd.Endpoints, postgresDB(url))
			if o.DocID != "" {
				dropDoc(postgresDB(url), o.DocID) // leave the user's database as it was
			}
			return err
		}
		dir, err := os.MkdirTemp("", "disco-lock-db-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		_, err = run(ctx, os.Stdout, etcd.Endpoints, sqliteDB(filepath.Join(dir, "resource.db")))
		return err
	})
}

// database says which database to tell the story on.
type database struct {
	driver, dsn string
	desc        string // for the story
}

// sqliteDB is a SQLite database in file.
func sqliteDB(file string) database {
	return database{driver: "sqlite", dsn: file + "?_pragma=busy_timeout(5000)", desc: "SQLite file " + filepath.Base(file)}
}

// postgresDB is the PostgreSQL database at url (postgres://...).
func postgresDB(url string) database {
	return database{driver: "pgx", dsn: url, desc: "PostgreSQL (DATABASE_URL)"}
}

// doc is the protected row: a database and the id of the story's document.
type doc struct {
	db *sql.DB
	id string
}

// ttl is the lease time to live of both owners: short, as it bounds how long
// a crashed owner blocks the others.
const ttl = 2 * time.Second

const (
	valueA     = "draft by A"
	valueB     = "final version by B"
	valueAlate = "late edit by A"
)

// outcome is what the story observed, for the test to check.
type outcome struct {
	TokenA, TokenB fencing.Token
	// ZombieErr is what the database answered to A's write after it woke up.
	ZombieErr error
	// Body and Token are the row's contents at the end.
	Body  string
	Token fencing.Token
	// DocID is the row the story used (deleted at the end).
	DocID string
}

// run tells the story against the etcd cluster at endpoints and the
// database d. It returns an error unless the story ended as promised: A's
// late write rejected, the row holding B's value.
func run(ctx context.Context, out io.Writer, endpoints []string, d database) (outcome, error) {
	var o outcome
	say, step := story.Narrator(out)

	db, err := openDB(ctx, d)
	if err != nil {
		return o, err
	}
	defer db.Close()
	// A row of its own, so that runs sharing a database never meet.
	row, err := newDoc(ctx, db, "report-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err != nil {
		return o, err
	}
	o.DocID = row.id
	say("database: %s, table documents(id, body, fence_token), row %q", d.desc, row.id)

	// Each owner is its own process in real life: here each gets its own
	// etcd client. The third client plays the world around A.
	clients := story.NewClients(endpoints)
	defer clients.Close()
	clis, err := clients.NewN(3)
	if err != nil {
		return o, err
	}
	cliA, cliB, world := clis[0], clis[1], clis[2]
	prefix := story.Prefix("lock/db")

	// Step 1: A locks and writes.
	step("1. A takes the lock and writes")
	a, err := etcdio.NewLock(cliA, prefix, etcdio.WithTTL(ttl))
	if err != nil {
		return o, err
	}
	defer a.Close()
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	aEvents := a.Subscribe(subCtx)
	ga, err := a.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("A: lock: %w", err)
	}
	o.TokenA = ga.Token()
	say("   A holds the lock: fencing token %d (lease %x, TTL %v)", ga.Token(), ga.LeaseID, ga.TTL)
	if err := write(ctx, row, valueA, ga.Token()); err != nil {
		return o, fmt.Errorf("A's first write was not accepted: %w", err)
	}
	say("   A writes %q with token %d: accepted, the row now carries token %d", valueA, ga.Token(), ga.Token())

	// Step 2: A is paused until its lease is gone.
	step("2. A is paused (say, a long GC pause) and its lease runs out")
	lost, err := story.Pause(ctx, world, "A", ga.LeaseID, aEvents)
	if err != nil {
		return o, err
	}
	say("   (simulated: another client revoked lease %x instead of waiting %v)", ga.LeaseID, ga.TTL)
	say("   A's Subscribe reports Lost for token %d: its hold is over", lost.Token)
	say("   a paused process sees nothing: when it wakes up it still believes it holds token %d", ga.Token())

	// Step 3: B locks and writes.
	step("3. B takes the lock and writes")
	b, err := etcdio.NewLock(cliB, prefix, etcdio.WithTTL(ttl))
	if err != nil {
		return o, err
	}
	defer b.Close()
	gb, err := b.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("B: lock: %w", err)
	}
	o.TokenB = gb.Token()
	if gb.Token() <= ga.Token() {
		return o, fmt.Errorf("B's token %d is not above A's %d", gb.Token(), ga.Token())
	}
	say("   B holds the lock: fencing token %d (higher than A's %d)", gb.Token(), ga.Token())
	if err := write(ctx, row, valueB, gb.Token()); err != nil {
		return o, fmt.Errorf("B's write was not accepted: %w", err)
	}
	say("   B writes %q with token %d: accepted, the row now carries token %d", valueB, gb.Token(), gb.Token())

	// Step 4: A wakes up and writes with the token it remembers.
	step("4. A wakes up and writes with its old token %d", ga.Token())
	o.ZombieErr = write(ctx, row, valueAlate, ga.Token())
	switch {
	case o.ZombieErr == nil:
		return o, fmt.Errorf("A's late write with old token %d was ACCEPTED: the fence failed", ga.Token())
	case !errors.Is(o.ZombieErr, fencing.ErrTokenStale):
		return o, fmt.Errorf("A's late write failed for another reason: %w", o.ZombieErr)
	}
	say("   rejected by the database: %v", o.ZombieErr)

	// Step 5: the row holds B's value.
	step("5. Outcome")
	o.Body, o.Token, err = read(ctx, row)
	if err != nil {
		return o, err
	}
	if o.Body != valueB || o.Token != gb.Token() {
		return o, fmt.Errorf("the row holds %q with token %d, want B's %q with token %d", o.Body, o.Token, valueB, gb.Token())
	}
	say("   the row holds %q with token %d: B's write survived, A's late write did not", o.Body, o.Token)
	if err := b.Unlock(ctx); err != nil {
		return o, fmt.Errorf("B: unlock: %w", err)
	}
	say("   B unlocks. The story ended as promised.")
	return o, nil
}

// openDB opens the database d, creating the documents table if needed.
func openDB(ctx context.Context, d database) (*sql.DB, error) {
	db, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", d.desc, err)
	}
	const schema = `CREATE TABLE IF NOT EXISTS documents (
	id          TEXT PRIMARY KEY,
	body        TEXT NOT NULL,
	fence_token BIGINT NOT NULL
)`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the documents table in %s: %w", d.desc, err)
	}
	return db, nil
}

// newDoc inserts the document id with fence_token 0, below every real token.
func newDoc(ctx context.Context, db *sql.DB, id string) (doc, error) {
	if _, err := db.ExecContext(ctx, `INSERT INTO documents (id, body, fence_token) VALUES ($1, '', 0)`, id); err != nil {
		return doc{}, fmt.Errorf("creating document %q: %w", id, err)
	}
	return doc{db: db, id: id}, nil
}

// dropDoc deletes the document id from d, if it can.
func dropDoc(d database, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := openDB(ctx, d)
	if err != nil {
		return
	}
	defer db.Close()
	_, _ = db.ExecContext(ctx, `DELETE FROM documents WHERE id = $1`, id)
}

// write stores body in the document if and only if t is at least the token
// of the last accepted write, and records t as the new one. The check and the
// write are ONE statement, so no other write can slip in between them (a
// SELECT followed by an UPDATE could be interleaved). Equal tokens pass, so
// the current holder may write many times. The statement is the same on
// SQLite and PostgreSQL. A token <= 0 (a client holding no grant) is
// refused before the statement: the row starts at fence_token 0, which
// "fence_token <= $2" alone would let a token 0 pass.
func write(ctx context.Context, d doc, body string, t fencing.Token) error {
	if t <= 0 {
		return fmt.Errorf("token %d is no grant's token: %w", t, fencing.ErrNoToken)
	}
	res, err := d.db.ExecContext(ctx,
		`UPDATE documents SET body = $1, fence_token = $2 WHERE id = $3 AND fence_token <= $2`,
		body, int64(t), d.id)
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update: %w", err)
	}
	if n == 1 {
		return nil
	}
	// Nothing changed: the row carries a higher token. Read it only to say
	// so; the decision was already made atomically above.
	_, current, err := read(ctx, d)
	if err != nil {
		return err
	}
	return fmt.Errorf("token %d is below the row's token %d: %w", t, current, fencing.ErrTokenStale)
}

func read(ctx context.Context, d doc) (string, fencing.Token, error) {
	var body string
	var t int64
	err := d.db.QueryRowContext(ctx, `SELECT body, fence_token FROM documents WHERE id = $1`, d.id).Scan(&body, &t)
	if err != nil {
		return "", 0, fmt.Errorf("reading document %q: %w", d.id, err)
	}
	return body, fencing.Token(t), nil
}
