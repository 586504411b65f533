// Package testserver holds what the tests' helpers for real servers
// (PostgreSQL, ZooKeeper, Redis) share: where to find a binary, the rule for
// a server that is not installed, free loopback ports, and an unprivileged
// user to run a server as when the tests run as root.
//
// The rule: a test that needs a server that is not installed is skipped with
// a message naming the command that installs it, unless
// DISCO_REQUIRE_SERVERS=1, which turns the skip into a failure (.ci/run sets
// it after installing every server).
package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
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

// FreePorts returns n distinct free TCP ports on 127.0.0.1: the listeners
// are held open together, so no port is handed out twice, and closed
// before returning. Another process may still take one before its user
// binds it; a caller that starts a server retries with fresh ports.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
