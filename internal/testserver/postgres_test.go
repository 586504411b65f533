package testserver

import (
	"errors"
	"net"
	"net/url"
	"testing"
	"time"
)

// A server whose port another process took in between is reported as such,
// so that Postgres tries a fresh port instead of failing the test.
func TestPostgresReportsATakenPort(t *testing.T) {
	bin := postgresBin()
	if bin == "" {
		Missing(t, "PostgreSQL (initdb and postgres under /usr/lib/postgresql/*/bin)", PostgresInstall)
	}
	dir, data, cred := initPostgres(t, bin)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = startPostgres(t, bin, dir, data, ln.Addr().(*net.TCPAddr).Port, cred)
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port: %v, want errPortTaken", err)
	}
}

func TestPostgresServes(t *testing.T) {
	u, err := url.Parse(Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatalf("the server at %s: %v", u, err)
	}
	c.Close()
}
