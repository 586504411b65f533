package markstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ahrtr/disco/fencing"
)

// DefaultTable is the table SQL uses unless WithTable says otherwise.
const DefaultTable = "disco_fencing_marks"

// SQL keeps marks in a table (scope TEXT PRIMARY KEY, mark BIGINT) of a
// database/sql database that understands INSERT ... ON CONFLICT ... DO
// UPDATE ... WHERE, RETURNING and $n placeholders: SQLite (3.35 or later,
// for example modernc.org/sqlite) and PostgreSQL (for example pgx's stdlib
// driver).
//
// The scope column holds the scope itself, but on a database that does not
// take every string as text: PostgreSQL refuses a NUL byte and invalid
// UTF-8 in a TEXT column (SQLite stores any bytes). There, a scope that is
// not valid UTF-8, holds a NUL byte or starts with the reserved prefix
// "\x7fb64:" (DEL, then "b64:") is stored as that prefix followed by the
// scope's bytes in standard padded base64; every other scope is stored as
// it is. So a guard may use any scope on either database, and the
// processes that share a table agree on each scope's row. NewSQL tells the
// two kinds of database apart with statements that neither fails (so it
// leaves no ERROR in PostgreSQL's log): a cast of two bytes to text, then,
// on a database that keeps them, such a string sent and returned.
//
// Raise is one statement, a conditional upsert that writes only a higher
// mark, so concurrent raises (from any number of processes sharing the
// database) never lower a mark. It is as durable as the database makes a
// committed statement: PostgreSQL with synchronous_commit on, SQLite with
// synchronous=FULL (its default in rollback-journal mode).
//
// Load is one SELECT and RaiseLoad (guard.RaiseLoader) one upsert with
// RETURNING, so guards in several processes, on several hosts, can share
// the table and fence as one resource (guard.WithStore). A resource that
// is itself in the database can check tokens in its own transactions:
// see CheckTx.
//
// On SQLite, a write finds the database busy (SQLITE_BUSY) while another
// connection writes, and database/sql keeps several connections even for
// one *sql.DB. NewSQL, Load, Raise and RaiseLoad wait that out: they try
// again, backing off, until the statement goes through, its context ends
// or 10 s have passed, so the database needs no busy_timeout. (CheckTx
// runs in the caller's transaction, and does not.)
type SQL struct {
	db                              *sql.DB
	load, raise, raiseLoad, checkTx string
	// encode: the database does not take every string as text, so the
	// scope column holds key(scope) (see SQL).
	encode bool
}

// encodedPrefix starts the stored form of a scope that the database could
// not take as text (see SQL). It starts with DEL, which no scope people
// write starts with.
const encodedPrefix = "\x7fb64:"

// key returns what the scope column holds for scope: scope itself, or, on
// a database that refuses some text, encodedPrefix and base64 for a scope
// that is not valid UTF-8, holds a NUL byte or starts with encodedPrefix.
// Distinct scopes have distinct keys: the scopes stored as they are do not
// start with encodedPrefix, and the others do, followed by an injective
// encoding.
func (s *SQL) key(scope string) string {
	if !s.encode || utf8.ValidString(scope) && !strings.ContainsRune(scope, 0) && !strings.HasPrefix(scope, encodedPrefix) {
		return scope
	}
	return encodedPrefix + base64.StdEncoding.EncodeToString([]byte(scope))
}

// takesAnyText reports whether the database takes any bytes as text and
// returns a string of a NUL byte and invalid UTF-8 as it was sent, as
// SQLite does; PostgreSQL refuses such a string (SQLSTATE 22021).
//
// It asks without making a statement fail, for PostgreSQL would log the
// refusal as an ERROR at every NewSQL: it first casts the bytes 00 ff to
// TEXT in a statement that no database of SQL's fails. SQLite reads
// x'00ff' as a blob and casts it to a text of those two bytes; PostgreSQL
// reads it as a bit string and casts it to the text "0000000011111111"
// (a database that reads it as bytes, to their escaped form): any text
// other than the two bytes themselves means the database does not take
// them. Only a database that does is then sent the string itself, as a
// scope is sent, and must return it unchanged: a driver that mangled it
// would make two scopes one. A database that fails either statement has
// failed: that is an error, not a kind of database.
func takesAnyText(ctx context.Context, db *sql.DB) (bool, error) {
	const probe = "\x00\xff"
	query := func(q string, args ...any) (string, error) {
		var got []byte
		err := retryBusy(ctx, func() error { return db.QueryRowContext(ctx, q, args...).Scan(&got) })
		return string(got), err
	}
	got, err := query(`SELECT CAST(x'00ff' AS TEXT)`)
	if err != nil {
		return false, fmt.Errorf("casting bytes to text: %w", err)
	}
	if got != probe {
		return false, nil
	}
	if got, err = query(`SELECT $1`, probe); err != nil {
		return false, fmt.Errorf("sending the database a string: %w", err)
	}
	if got != probe {
		return false, fmt.Errorf("the database takes the bytes %q as text but returned %q for the string", probe, got)
	}
	return true, nil
}

// busyWait bounds how long a statement of SQL waits out a busy SQLite
// database (see SQL) when its context allows longer.
const busyWait = 10 * time.Second

// retryBusy runs f, and runs it again while it fails only because an
// SQLite database is busy, until ctx ends or busyWait has passed. Every
// statement it runs is safe to repeat: a CREATE TABLE IF NOT EXISTS, a
// read, a raise that never lowers a mark.
func retryBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(busyWait)
	delay := time.Millisecond
	for {
		err := f()
		if err == nil || !isBusy(err) || time.Now().Add(delay).After(deadline) {
			return err
		}
		timer := time.NewTimer(delay/2 + rand.N(delay)) // jittered: writers do not retry in step
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		delay = min(2*delay, 64*time.Millisecond)
	}
}

// isBusy reports whether err says that an SQLite database is busy or
// locked by another connection: SQLITE_BUSY or SQLITE_LOCKED (primary
// codes 5 and 6), told by the driver's error code (modernc.org/sqlite) or
// by SQLite's message (drivers without a Code method).
func isBusy(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case 5, 6:
			return true
		}
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "database is locked") || strings.Contains(msg, "database table is locked")
}

// SQLOption configures NewSQL.
type SQLOption func(*sqlConfig)

type sqlConfig struct{ table string }

// WithTable makes SQL use table instead of DefaultTable: a plain identifier
// (ASCII letters, digits, underscores; not starting with a digit; at most 63
// bytes).
func WithTable(table string) SQLOption {
	return func(c *sqlConfig) { c.table = table }
}

func validIdent(s string) bool {
	if s == "" || len(s) > 63 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// createTable creates table unless it exists. PostgreSQL fails a CREATE
// TABLE IF NOT EXISTS that races another one of the same table (the
// replicas of a resource starting at once on a fresh database): the one
// that lost finds the table's type or row taken (SQLSTATE 42710 or 23505)
// once the winner has committed, so that a second CREATE, after it, finds
// the table, or creates it if the winner rolled back. So a CREATE that
// fails is tried once more, and its error is the second one's.
func createTable(ctx context.Context, db *sql.DB, table string) error {
	create := func() error {
		return retryBusy(ctx, func() error {
			_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+table+` (scope TEXT PRIMARY KEY, mark BIGINT NOT NULL)`)
			return err
		})
	}
	if err := create(); err == nil || ctx.Err() != nil {
		return err
	}
	return create()
}

// NewSQL returns a store in db, creating its table if it does not exist.
// The replicas of a resource may call it at once on a fresh database: each
// finds the table one of them created (on PostgreSQL, those whose CREATE
// lost the race leave an ERROR in its log, that once). The caller owns db;
// the store never closes it. A nil db, a table name that is not a plain
// identifier (WithTable) or a nil ctx is an error wrapping
// ErrInvalidArgument, and nothing is created.
func NewSQL(ctx context.Context, db *sql.DB, opts ...SQLOption) (*SQL, error) {
	c := sqlConfig{table: DefaultTable}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if db == nil {
		return nil, fmt.Errorf("markstore: NewSQL: nil *sql.DB: %w", ErrInvalidArgument)
	}
	if ctx == nil {
		return nil, nilContext("NewSQL")
	}
	if !validIdent(c.table) {
		return nil, fmt.Errorf("markstore: NewSQL: table name %q is not a plain identifier: %w", c.table, ErrInvalidArgument)
	}
	if err := createTable(ctx, db, c.table); err != nil {
		return nil, fmt.Errorf("markstore: creating table %s: %w", c.table, err)
	}
	anyText, err := takesAnyText(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("markstore: NewSQL: %w", err)
	}
	upsert := `INSERT INTO ` + c.table + ` (scope, mark) VALUES ($1, $2)
ON CONFLICT (scope) DO UPDATE SET mark = `
	return &SQL{
		db:     db,
		encode: !anyText,
		load:   `SELECT mark FROM ` + c.table + ` WHERE scope = $1`,
		raise:  upsert + `excluded.mark WHERE ` + c.table + `.mark < excluded.mark`,
		// The update reads the row it locked, the latest one, so the mark
		// it returns is the stored mark after the raise.
		raiseLoad: upsert + `CASE WHEN ` + c.table + `.mark < excluded.mark THEN excluded.mark ELSE ` + c.table + `.mark END
RETURNING mark`,
		checkTx: upsert + `excluded.mark WHERE ` + c.table + `.mark <= excluded.mark
RETURNING mark`,
	}, nil
}

// check refuses an SQL that NewSQL did not make: nil (a NewSQL error
// ignored) or a zero SQL, which has no database and no statements; and a
// nil ctx, which database/sql would panic on, leaving the *sql.DB locked.
func (s *SQL) check(ctx context.Context, method string) error {
	if s == nil || s.db == nil {
		return fmt.Errorf("markstore: SQL.%s on an SQL not made by NewSQL: %w", method, ErrInvalidArgument)
	}
	if ctx == nil {
		return nilContext("SQL." + method)
	}
	return nil
}

// Load returns the mark of scope, 0 if it has none.
func (s *SQL) Load(ctx context.Context, scope string) (fencing.Token, error) {
	if err := s.check(ctx, "Load"); err != nil {
		return 0, err
	}
	var m int64
	err := retryBusy(ctx, func() error { return s.db.QueryRowContext(ctx, s.load, s.key(scope)).Scan(&m) })
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("markstore: loading the mark of %q: %w", scope, err)
	}
	if m < 0 {
		return 0, fmt.Errorf("markstore: the mark of %q is %d: %w", scope, m, ErrCorrupt)
	}
	return fencing.Token(m), nil
}

// Raise sets the mark of scope to t if t is above it, in one statement.
func (s *SQL) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if err := s.check(ctx, "Raise"); err != nil {
		return err
	}
	if t <= 0 {
		return fmt.Errorf("markstore: Raise: %d is not a token: %w", t, ErrInvalidArgument)
	}
	if err := retryBusy(ctx, func() error {
		_, err := s.db.ExecContext(ctx, s.raise, s.key(scope), int64(t))
		return err
	}); err != nil {
		return fmt.Errorf("markstore: raising the mark of %q to %d: %w", scope, t, err)
	}
	return nil
}

// RaiseLoad is Raise, and returns the mark of scope after it (at least t),
// in one statement (guard.RaiseLoader).
func (s *SQL) RaiseLoad(ctx context.Context, scope string, t fencing.Token) (fencing.Token, error) {
	if err := s.check(ctx, "RaiseLoad"); err != nil {
		return 0, err
	}
	if t <= 0 {
		return 0, fmt.Errorf("markstore: Raise: %d is not a token: %w", t, ErrInvalidArgument)
	}
	var m int64
	if err := retryBusy(ctx, func() error { return s.db.QueryRowContext(ctx, s.raiseLoad, s.key(scope), int64(t)).Scan(&m) }); err != nil {
		return 0, fmt.Errorf("markstore: raising the mark of %q to %d: %w", scope, t, err)
	}
	return fencing.Token(m), nil
}

// CheckTx fences a resource that lives in the database itself, inside the
// caller's transaction tx: it accepts t if t is at least the stored mark of
// scope, raising the mark to t, and otherwise returns an error wrapping
// fencing.ErrTokenStale (t <= 0: fencing.ErrNoToken; a nil tx or ctx:
// ErrInvalidArgument, and tx is left as it was). It is one statement, the
// conditional upsert "UPDATE ... SET mark = t WHERE mark <= t" on the
// scope's row: the token check of a table row (mark <= t, then write t),
// generalised to any scope.
//
// Call it first in tx, before the writes it protects, and commit them
// together. The row stays locked until tx ends, so transactions of one
// scope that pass the check run one after the other, whichever process or
// replica runs them; a transaction with a lower token that comes later
// fails the check; and the mark commits, or rolls back, with the writes
// it admitted. So, unlike a guard's in-memory Admit, this orders the
// writes of every replica of a resource: once a transaction with token T
// has committed, no transaction with a token below T commits a write it
// checked. Equal tokens pass too, one transaction after the other. On
// SQLite, begin tx so that it writes from the start (BEGIN IMMEDIATE, or
// _txlock=immediate with modernc.org/sqlite), or another writer may make
// it fail with SQLITE_BUSY.
//
// The marks are those of the store's table: a guard on this store
// (guard.WithStore) in front of the resource and CheckTx inside it share
// them.
func (s *SQL) CheckTx(ctx context.Context, tx *sql.Tx, scope string, t fencing.Token) error {
	if err := s.check(ctx, "CheckTx"); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("markstore: CheckTx: nil *sql.Tx: %w", ErrInvalidArgument)
	}
	if t <= 0 {
		return fmt.Errorf("markstore: CheckTx: %d is not a token (tokens are > 0): %w", t, fencing.ErrNoToken)
	}
	var m int64
	err := tx.QueryRowContext(ctx, s.checkTx, s.key(scope), int64(t)).Scan(&m)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("markstore: checking token %d of %q: %w", t, scope, err)
	}
	// No row updated: the stored mark is above t. Read it to say so.
	if err := tx.QueryRowContext(ctx, s.load, s.key(scope)).Scan(&m); err == nil && m > int64(t) {
		return fmt.Errorf("markstore: token %d of %q is below the mark %d: %w", t, scope, m, fencing.ErrTokenStale)
	}
	return fmt.Errorf("markstore: token %d of %q is below the mark: %w", t, scope, fencing.ErrTokenStale)
}
