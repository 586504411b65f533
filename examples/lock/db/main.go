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
// cluster) and an embedded SQLite database (pure Go, modernc.org/sqlite) in a
// temporary directory that is removed at the end. It exits 0 only if the
// story ended as promised.
//
// DATABASE_URL (Postgres) is not supported yet: this module has no Postgres
// driver. The fenced write is one portable statement, so with a driver it
// would only need $1-style placeholders:
//
//	UPDATE documents SET body = $1, fence_token = $2 WHERE id = $3 AND fence_token <= $2
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/fencing"
)

func main() { story.Main("db example", mainErr) }

func mainErr(ctx context.Context) error {
	if os.Getenv("DATABASE_URL") != "" {
		return errors.New("DATABASE_URL is set, but Postgres is not supported yet (no Postgres driver in this module); unset it to use the embedded SQLite database")
	}
	return story.WithEtcd(ctx, os.Stdout, story.ShowAddress, func(ctx context.Context, etcd story.Etcd) error {
		dir, err := os.MkdirTemp("", "disco-lock-db-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		_, err = run(ctx, os.Stdout, etcd.Endpoints, filepath.Join(dir, "resource.db"))
		return err
	})
}

// ttl is the lease time to live of both owners: short, as it bounds how long
// a crashed owner blocks the others.
const ttl = 2 * time.Second

const (
	docID      = "report"
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
}

// run tells the story against the etcd cluster at endpoints and a SQLite
// database in the file dbFile. It returns an error unless the story ended
// as promised: A's late write rejected, the row holding B's value.
func run(ctx context.Context, out io.Writer, endpoints []string, dbFile string) (outcome, error) {
	var o outcome
	say, step := story.Narrator(out)

	db, err := openDB(ctx, dbFile)
	if err != nil {
		return o, err
	}
	defer db.Close()
	say("database: SQLite file %s, table documents(id, body, fence_token)", filepath.Base(dbFile))

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
	if err := write(ctx, db, valueA, ga.Token()); err != nil {
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
	if err := write(ctx, db, valueB, gb.Token()); err != nil {
		return o, fmt.Errorf("B's write was not accepted: %w", err)
	}
	say("   B writes %q with token %d: accepted, the row now carries token %d", valueB, gb.Token(), gb.Token())

	// Step 4: A wakes up and writes with the token it remembers.
	step("4. A wakes up and writes with its old token %d", ga.Token())
	o.ZombieErr = write(ctx, db, valueAlate, ga.Token())
	switch {
	case o.ZombieErr == nil:
		return o, fmt.Errorf("A's late write with old token %d was ACCEPTED: the fence failed", ga.Token())
	case !errors.Is(o.ZombieErr, fencing.ErrTokenStale):
		return o, fmt.Errorf("A's late write failed for another reason: %w", o.ZombieErr)
	}
	say("   rejected by the database: %v", o.ZombieErr)

	// Step 5: the row holds B's value.
	step("5. Outcome")
	o.Body, o.Token, err = read(ctx, db)
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

// openDB opens (creating if needed) the database with one document row whose
// fence_token starts at 0, below every real token.
func openDB(ctx context.Context, file string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", file+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("opening SQLite database: %w", err)
	}
	const schema = `
CREATE TABLE IF NOT EXISTS documents (
	id          TEXT PRIMARY KEY,
	body        TEXT NOT NULL,
	fence_token INTEGER NOT NULL
);
INSERT INTO documents (id, body, fence_token) VALUES ('` + docID + `', '', 0)
	ON CONFLICT (id) DO NOTHING;`
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("creating the documents table: %w", err)
	}
	return db, nil
}

// write stores body in the document if and only if t is at least the token
// of the last accepted write, and records t as the new one. The check and the
// write are ONE statement, so no other write can slip in between them (a
// SELECT followed by an UPDATE could be interleaved). Equal tokens pass, so
// the current holder may write many times.
func write(ctx context.Context, db *sql.DB, body string, t fencing.Token) error {
	res, err := db.ExecContext(ctx,
		`UPDATE documents SET body = ?, fence_token = ? WHERE id = ? AND fence_token <= ?`,
		body, int64(t), docID, int64(t))
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
	_, current, err := read(ctx, db)
	if err != nil {
		return err
	}
	return fmt.Errorf("token %d is below the row's token %d: %w", t, current, fencing.ErrTokenStale)
}

func read(ctx context.Context, db *sql.DB) (string, fencing.Token, error) {
	var body string
	var t int64
	err := db.QueryRowContext(ctx, `SELECT body, fence_token FROM documents WHERE id = ?`, docID).Scan(&body, &t)
	if err != nil {
		return "", 0, fmt.Errorf("reading document %q: %w", docID, err)
	}
	return body, fencing.Token(t), nil
}
