package faultsuite

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// clock is the monotonic time every record of a round is stamped with.
type clock struct{ base time.Time }

func (c clock) now() int64 { return int64(time.Since(c.base)) }

type outcome int

const (
	accepted outcome = iota
	stale            // rejected: the token was below the mark
	unknown          // no answer: the request may or may not have taken effect
)

// op is one attempted request to a register, as its client saw it.
type op struct {
	client    int
	write     bool
	value     string // written, or read back
	token     int64
	call, ret int64
	out       outcome
}

// section is one admitted critical section, as the resource saw it.
type section struct {
	owner       int
	token       int64
	enter, exit int64
}

// httpRegister is a register behind guard.HTTPMiddleware. POST /?v=&owner=
// writes, GET /?owner= reads; both carry the token in fencing.HTTPHeader.
type httpRegister struct {
	clk    clock
	guard  *guard.Guard
	srv    *httptest.Server
	client *http.Client

	mu       sync.Mutex
	value    string
	applied  []int64  // the token of every request applied, in the order applied
	written  []string // the value of every write applied, in the order applied
	sections []section
}

func newHTTPRegister(clk clock) *httpRegister {
	r := &httpRegister{clk: clk, guard: guard.New()}
	r.srv = httptest.NewServer(r.guard.HTTPMiddleware(http.HandlerFunc(r.serve)))
	r.client = &http.Client{Timeout: 10 * time.Second}
	return r
}

func (r *httpRegister) close() {
	r.client.CloseIdleConnections()
	r.srv.Close()
}

// serve runs inside the critical section Admit granted.
func (r *httpRegister) serve(w http.ResponseWriter, req *http.Request) {
	tok, _ := fencing.FromHTTP(req) // the middleware checked it
	owner := 0
	fmt.Sscan(req.URL.Query().Get("owner"), &owner)
	enter := r.clk.now()
	defer func() {
		r.mu.Lock()
		r.sections = append(r.sections, section{owner: owner, token: int64(tok), enter: enter, exit: r.clk.now()})
		r.mu.Unlock()
	}()
	if req.Context().Err() != nil {
		// Superseded by a higher token after admission: do nothing.
		http.Error(w, "superseded", http.StatusConflict)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Method == http.MethodPost {
		r.value = req.URL.Query().Get("v")
		r.written = append(r.written, r.value)
	}
	r.applied = append(r.applied, int64(tok))
	io.WriteString(w, r.value)
}

// do sends one request and records it.
func (r *httpRegister) do(client int, write bool, value string, tok int64) op {
	q := url.Values{"owner": {fmt.Sprint(client)}}
	method := http.MethodGet
	if write {
		method = http.MethodPost
		q.Set("v", value)
	}
	o := op{client: client, write: write, value: value, token: tok, call: r.clk.now()}
	req, err := http.NewRequestWithContext(context.Background(), method, r.srv.URL+"/?"+q.Encode(), nil)
	if err != nil {
		panic(err)
	}
	fencing.InjectHTTP(req, fencing.Token(tok))
	resp, err := r.client.Do(req)
	o.out = unknown
	if err == nil {
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case rerr != nil:
		case resp.StatusCode == http.StatusOK:
			o.out = accepted
			if !write {
				o.value = string(body)
			}
		case resp.StatusCode == http.StatusConflict:
			o.out = stale
		}
	}
	o.ret = r.clk.now()
	return o
}

// sqlRegister is a register in a SQLite row; the fencing check is in the
// UPDATE itself, and a trigger logs every update in the order SQLite
// applied them.
type sqlRegister struct {
	clk clock
	db  *sql.DB
}

func openSQLRegister(t testing.TB) *sqlRegister {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "register.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // one writer: no SQLITE_BUSY
	for _, stmt := range []string{
		`CREATE TABLE reg (id INTEGER PRIMARY KEY, value TEXT NOT NULL, token INTEGER NOT NULL)`,
		`CREATE TABLE log (seq INTEGER PRIMARY KEY AUTOINCREMENT, value TEXT NOT NULL, token INTEGER NOT NULL)`,
		`CREATE TRIGGER reg_log AFTER UPDATE ON reg BEGIN
			INSERT INTO log (value, token) VALUES (NEW.value, NEW.token);
		END`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.Close() })
	return &sqlRegister{db: db}
}

// reset empties the register for a new round.
func (s *sqlRegister) reset(t testing.TB, clk clock) {
	t.Helper()
	s.clk = clk
	for _, stmt := range []string{`DELETE FROM reg`, `DELETE FROM log`, `INSERT INTO reg (id, value, token) VALUES (1, '', 0)`} {
		if _, err := s.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *sqlRegister) write(client int, value string, tok int64) op {
	o := op{client: client, write: true, value: value, token: tok, call: s.clk.now(), out: unknown}
	res, err := s.db.Exec(`UPDATE reg SET value = ?, token = ? WHERE id = 1 AND token <= ?`, value, tok, tok)
	if err == nil {
		if n, err := res.RowsAffected(); err == nil {
			if n == 1 {
				o.out = accepted
			} else {
				o.out = stale
			}
		}
	}
	o.ret = s.clk.now()
	return o
}

// logged returns the tokens and values of every accepted update, in the
// order SQLite applied them.
func (s *sqlRegister) logged(t testing.TB) (tokens []int64, values []string) {
	t.Helper()
	rows, err := s.db.Query(`SELECT token, value FROM log ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var tok int64
		var v string
		if err := rows.Scan(&tok, &v); err != nil {
			t.Fatal(err)
		}
		tokens, values = append(tokens, tok), append(values, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tokens, values
}

func describe(o op) string {
	kind := "read"
	if o.write {
		kind = "write"
	}
	res := map[outcome]string{accepted: "ok", stale: "stale", unknown: "unknown"}[o.out]
	return strings.TrimSpace(fmt.Sprintf("c%d %s(%q, tok %d) -> %s [%d, %d]", o.client, kind, o.value, o.token, res, o.call, o.ret))
}
