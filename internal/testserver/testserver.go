// Package testserver holds what the tests' helpers for real servers
// (PostgreSQL, ZooKeeper, Redis) share: where to find a binary, the rule for
// a server that is not installed, reserved loopback ports, and an unprivileged
// user to run a server as when the tests run as root.
//
// The rule: a test that needs a server that is not installed is skipped with
// a message naming the command that installs it, unless
// DISCO_REQUIRE_SERVERS=1, which turns the skip into a failure (.ci/run sets
// it after installing every server).
package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/ahrtr/disco/internal/ports"
)

// RequireEnv, set to 1, makes a missing server fail its tests instead of
// skipping them.
const RequireEnv = "DISCO_REQUIRE_SERVERS"

// Required reports whether missing servers fail tests rather than skip them.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Missing skips t (or fails it, under DISCO_REQUIRE_SERVERS=1) because what
// is not installed; install is the command that installs it.
func Missing(t testing.TB, what, install string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not installed; install it with: %s", what, install)
	if Required() {
		t.Fatalf("%s (%s=1 requires it)", msg, RequireEnv)
	}
	t.Skip(msg)
}

// FirstExisting returns the first of paths that exists, or "".
func FirstExisting(paths ...string) string {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// LookPath returns the path of the first of names found on PATH or as an
// absolute path, or "".
func LookPath(names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// ReservePorts returns n distinct loopback TCP ports reserved for the rest
// of the process (see package ports): a server stopped on one can start on
// it again, for no other socket takes it meanwhile.
func ReservePorts(n int) ([]int, error) {
	r, err := ports.Reserve(n)
	if err != nil {
		return nil, err
	}
	reservedMu.Lock()
	defer reservedMu.Unlock()
	reserved = append(reserved, r) // keeps the locks' files from being collected
	return r.Ports(), nil
}

var (
	reservedMu sync.Mutex
	reserved   []*ports.Reservation
)

// ReservePort is ReservePorts for one port.
func ReservePort() (int, error) {
	p, err := ReservePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
