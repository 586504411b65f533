package markstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ahrtr/disco/fencing"
)

// DefaultTable is the table SQL uses unless WithTable says otherwise.
const DefaultTable = "disco_fencing_marks"

// SQL keeps marks in a table (scope TEXT PRIMARY KEY, mark BIGINT) of a
// database/sql database that understands INSERT ... ON CONFLICT ... DO
// UPDATE ... WHERE and $n placeholders: SQLite (3.24 or later, for example
// modernc.org/sqlite) and PostgreSQL (for example pgx's stdlib driver).
//
// Raise is one statement, a conditional upsert that writes only a higher
// mark, so concurrent raises (from any number of processes sharing the
// database) never lower a mark. It is as durable as the database makes a
// committed statement: PostgreSQL with synchronous_commit on, SQLite with
// synchronous=FULL (its default in rollback-journal mode).
type SQL struct {
	db          *sql.DB
	load, raise string
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

// NewSQL returns a store in db, creating its table if it does not exist.
// The caller owns db; the store never closes it.
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
	if !validIdent(c.table) {
		return nil, fmt.Errorf("markstore: NewSQL: table name %q is not a plain identifier: %w", c.table, ErrInvalidArgument)
	}
	create := `CREATE TABLE IF NOT EXISTS ` + c.table + ` (scope TEXT PRIMARY KEY, mark BIGINT NOT NULL)`
	if _, err := db.ExecContext(ctx, create); err != nil {
		return nil, fmt.Errorf("markstore: creating table %s: %w", c.table, err)
	}
	return &SQL{
		db:   db,
		load: `SELECT mark FROM ` + c.table + ` WHERE scope = $1`,
		raise: `INSERT INTO ` + c.table + ` (scope, mark) VALUES ($1, $2)
ON CONFLICT (scope) DO UPDATE SET mark = excluded.mark WHERE ` + c.table + `.mark < excluded.mark`,
	}, nil
}

// Load returns the mark of scope, 0 if it has none.
func (s *SQL) Load(ctx context.Context, scope string) (fencing.Token, error) {
	var m int64
	err := s.db.QueryRowContext(ctx, s.load, scope).Scan(&m)
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
	if t <= 0 {
		return fmt.Errorf("markstore: Raise: %d is not a token: %w", t, ErrInvalidArgument)
	}
	if _, err := s.db.ExecContext(ctx, s.raise, scope, int64(t)); err != nil {
		return fmt.Errorf("markstore: raising the mark of %q to %d: %w", scope, t, err)
	}
	return nil
}
