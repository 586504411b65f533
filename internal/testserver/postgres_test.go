package testserver

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
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
	dir, data, cred, err := initPostgres(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, stop, _, err := startPostgres(bin, dir, data, ln.Addr().(*net.TCPAddr).Port, cred)
	if err == nil {
		stop()
	}
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port: %v, want errPortTaken", err)
	}
}

func TestPostgresServes(t *testing.T) {
	if err := dialURL(Postgres(t)); err != nil {
		t.Fatal(err)
	}
}

// A server a program launched serves until Stop, which ends it (a second
// Stop does nothing).
func TestLaunchPostgresStops(t *testing.T) {
	if !PostgresInstalled() {
		Missing(t, "PostgreSQL (initdb and postgres under /usr/lib/postgresql/*/bin)", PostgresInstall)
	}
	srv, err := LaunchPostgres()
	if err != nil {
		t.Fatal(err)
	}
	if err := dialURL(srv.URL); err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	srv.Stop()
	srv.Stop()
	if dialURL(srv.URL) == nil {
		t.Fatalf("the server at %s still accepts connections after Stop", srv.URL)
	}
}

// dialURL connects to the host of a server's URL, and hangs up.
func dialURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return fmt.Errorf("the server at %s: %w", u, err)
	}
	return c.Close()
}
