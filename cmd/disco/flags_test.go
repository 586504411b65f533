package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deadEndpoint returns a loopback address nothing listens on.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Bad flags and arguments, a dead endpoint and a missing CMD end disco
// promptly with a message that says what is wrong and a non-zero status.
func TestBadInput(t *testing.T) {
	noLeaks(t)
	dead := deadEndpoint(t)
	notExec := filepath.Join(t.TempDir(), "plain-file")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
		within time.Duration
	}{
		{"no command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`, 5 * time.Second},
		{"unknown flag", []string{"status", "/x", "--bogus"}, exitUsage, "unknown flag: --bogus", 5 * time.Second},
		{"lock without CMD", []string{"lock", "/x"}, exitUsage, "requires at least 2 arg(s)", 5 * time.Second},
		{"lock without --", []string{"lock", "/x", "true"}, exitUsage, "put -- before CMD", 5 * time.Second},
		{"elect without VALUE", []string{"elect", "/x"}, exitUsage, "requires at least 2 arg(s)", 5 * time.Second},
		{"status without NAME", []string{"status"}, exitUsage, "accepts 1 arg(s), received 0", 5 * time.Second},
		{"bad kind", []string{"status", "/x", "--kind", "queue"}, exitUsage, `--kind "queue": want lock, rwlock or election`, 5 * time.Second},
		{"fractional ttl", []string{"--ttl", "1500ms", "lock", "/x", "--", "true"}, exitUsage, "--ttl 1.5s: must be whole seconds", 5 * time.Second},
		{"bad duration", []string{"--dial-timeout", "soon", "status", "/x"}, exitUsage, `invalid argument "soon"`, 5 * time.Second},
		{"bad port", []string{"etcd", "--client-port", "70000"}, exitUsage, "--client-port 70000: not a port", 5 * time.Second},
		{"name /", []string{"lock", "/", "--", "true"}, exitUsage, `NAME "/": must not end with "/"`, 5 * time.Second},
		{"CMD not found", []string{"lock", nameOf(t) + "/nf", "--", "/nonexistent/disco-test-cmd"}, exitNotFound, "no such file", 10 * time.Second},
		{"CMD not executable", []string{"lock", nameOf(t) + "/ne", "--", notExec}, exitNoExec, "permission denied", 10 * time.Second},
		// A dead endpoint fails within the dial timeout (plus start-up).
		{"dead endpoint status", []string{"--endpoints", dead, "--dial-timeout", "700ms", "status", "/x"}, exitFailure,
			"etcd at " + dead + " did not answer within 700ms (--dial-timeout)", 3 * time.Second},
		{"dead endpoint lock", []string{"--endpoints", dead, "--dial-timeout", "700ms", "lock", "/x", "--", "true"}, exitFailure,
			"did not answer within 700ms", 3 * time.Second},
		{"dead endpoint observe", []string{"--endpoints", dead, "--dial-timeout", "700ms", "observe", "/x"}, exitFailure,
			"did not answer within 700ms", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, _, stderr := runDisco(t, tc.within+5*time.Second, tc.args...)
			if took := time.Since(start); took > tc.within {
				t.Errorf("took %v, more than %v", took, tc.within)
			}
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit status %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if !strings.HasPrefix(stderr, "disco: ") {
				t.Fatalf("stderr %q does not start with disco:", stderr)
			}
		})
	}
}

// 'disco etcd' prints an endpoint to export that serves, and stops at
// SIGINT with status 0.
func TestEtcdCommand(t *testing.T) {
	noLeaks(t)
	p := startDisco(t, "etcd", "--client-port=0", "--peer-port=0", "--unsafe-no-fsync")
	out := p.stdout.await(t, "\n", 30*time.Second)
	ep, ok := strings.CutPrefix(strings.TrimSpace(out), "export ETCD_ENDPOINTS=http://127.0.0.1:")
	if !ok {
		t.Fatalf("printed %q, want export ETCD_ENDPOINTS=...", out)
	}
	if _, err := strconv.Atoi(ep); err != nil {
		t.Fatalf("printed %q: no port", out)
	}
	endpoint := "http://127.0.0.1:" + ep
	m := regexp.MustCompile(`data in (\S+);`).FindStringSubmatch(p.stderr.await(t, "Ctrl-C", 5*time.Second))
	if m == nil {
		t.Fatalf("stderr %q names no data directory", p.stderr)
	}
	dataDir := m[1]
	t.Cleanup(func() { os.RemoveAll(dataDir) }) // should the test fail first
	code, stdout, stderr := runDisco(t, 10*time.Second, "--endpoints", endpoint, "elect", "/disco-etcd-test", "v", "--", "sh", "-c", "echo token=$FENCING_TOKEN")
	if code != 0 || !strings.Contains(stdout, "token=") {
		t.Fatalf("elect against %s: status %d, stdout %q, stderr %q", endpoint, code, stdout, stderr)
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary data directory %s left behind: %v", dataDir, err)
	}
}
