package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
		{"unknown flag", []string{"status", "/x", "--bogus"}, exitUsage, "status: unknown flag: --bogus", 5 * time.Second},
		{"unknown flag of lock", []string{"lock", "--bogus", "/x", "--", "true"}, exitUsage, "lock: unknown flag: --bogus", 5 * time.Second},
		{"lock without NAME", []string{"lock"}, exitUsage, "lock: no NAME", 5 * time.Second},
		{"lock without CMD", []string{"lock", "/x"}, exitUsage, "lock: no CMD after --", 5 * time.Second},
		{"lock with nothing after --", []string{"lock", "/x", "--"}, exitUsage, "lock: no CMD after --", 5 * time.Second},
		{"lock without --", []string{"lock", "/x", "true"}, exitUsage, "lock: put -- before CMD", 5 * time.Second},
		{"elect without VALUE", []string{"elect", "/x"}, exitUsage, "elect: no VALUE", 5 * time.Second},
		{"elect with nothing after --", []string{"elect", "/x", "v", "--"}, exitUsage, "elect: no CMD after --", 5 * time.Second},
		{"status without NAME", []string{"status"}, exitUsage, "status: no NAME", 5 * time.Second},
		{"status with two NAMEs", []string{"status", "/a", "/b"}, exitUsage, "status: one NAME, not 2: /a /b", 5 * time.Second},
		{"observe without NAME", []string{"observe"}, exitUsage, "observe: no NAME", 5 * time.Second},
		{"etcd with an argument", []string{"etcd", "now"}, exitUsage, "etcd: takes no arguments, not now", 5 * time.Second},
		{"bad kind", []string{"status", "/x", "--kind", "queue"}, exitUsage, `status: --kind "queue": want lock, rwlock or election`, 5 * time.Second},
		{"fractional ttl", []string{"--ttl", "1500ms", "lock", "/x", "--", "true"}, exitUsage, "--ttl 1.5s: must be whole seconds", 5 * time.Second},
		{"bad duration", []string{"--dial-timeout", "soon", "status", "/x"}, exitUsage, `invalid argument "soon"`, 5 * time.Second},
		{"bad port", []string{"etcd", "--client-port", "70000"}, exitUsage, "disco: etcd: --client-port 70000: not a port", 5 * time.Second},
		{"bad peer port", []string{"etcd", "--peer-port", "-1"}, exitUsage, "disco: etcd: --peer-port -1: not a port", 5 * time.Second},
		{"bad log level", []string{"etcd", "--client-port=0", "--peer-port=0", "--log-level", "loud"}, exitUsage, "disco: etcd: --log-level: ", 5 * time.Second},
		{"name /", []string{"lock", "/", "--", "true"}, exitUsage, `NAME "/": must not end with "/"`, 5 * time.Second},
		{"negative grace of lock", []string{"lock", "--grace", "-1s", "/x", "--", "true"}, exitUsage, "lock: --grace -1s: must not be negative", 5 * time.Second},
		{"negative grace of elect", []string{"elect", "--grace", "-1s", "/x", "v", "--", "true"}, exitUsage, "elect: --grace -1s: must not be negative", 5 * time.Second},
		{"bad stop-at of elect without CMD", []string{"elect", "--stop-at", "bogus", "/x", "v"}, exitUsage, `disco: elect: --stop-at "bogus"`, 5 * time.Second},
		{"bad stop-at of lock", []string{"lock", "--stop-at", "bogus", "/x", "--", "true"}, exitUsage, `disco: lock: --stop-at "bogus"`, 5 * time.Second},
		{"CMD not found", []string{"lock", nameOf(t) + "/nf", "--", "/nonexistent/disco-test-cmd"}, exitNotFound, "no such file", 10 * time.Second},
		{"CMD not executable", []string{"lock", nameOf(t) + "/ne", "--", notExec}, exitNoExec, "permission denied", 10 * time.Second},
		// A dead endpoint fails within the dial timeout (plus start-up).
		{"dead endpoint status", []string{"--endpoints", dead, "--dial-timeout", "700ms", "status", "/x"}, exitFailure,
			"etcd at " + dead + " did not answer within 700ms (--dial-timeout)", 3 * time.Second},
		{"dead endpoint lock", []string{"--endpoints", dead, "--dial-timeout", "700ms", "lock", "/x", "--", "true"}, exitFailure,
			"did not answer within 700ms", 3 * time.Second},
		{"dead endpoint observe", []string{"--endpoints", dead, "--dial-timeout", "700ms", "observe", "/x"}, exitFailure,
			"did not answer within 700ms", 3 * time.Second},
		// A host that does not resolve is named as such, not as silent.
		{"unknown host", []string{"--endpoints", "disco-no-such-host.invalid:2379", "--dial-timeout", "700ms", "status", "/x"}, exitFailure,
			`etcd at disco-no-such-host.invalid:2379: no such host "disco-no-such-host.invalid"`, 5 * time.Second},
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
			// A usage error points at its own command's help; any other
			// error is one line.
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if tc.code == exitUsage {
				help := "Run 'disco --help' for usage."
				if i := slices.IndexFunc(tc.args, isSubcommand); i >= 0 {
					help = "Run 'disco " + tc.args[i] + " --help' for usage."
				}
				if len(lines) != 2 || lines[1] != help {
					t.Fatalf("stderr %q: want one line and %q", stderr, help)
				}
			} else if len(lines) != 1 {
				t.Fatalf("stderr %q: want one line", stderr)
			}
		})
	}
}

// isSubcommand says whether a is one of disco's commands.
func isSubcommand(a string) bool {
	return slices.Contains([]string{"lock", "elect", "observe", "status", "etcd"}, a)
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

// 'disco etcd' on a port in use says so in one line that names the port
// and the flags that pick free ones: no stack trace, no etcd log lines.
func TestEtcdPortInUse(t *testing.T) {
	noLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	for _, flag := range []string{"--client-port", "--peer-port"} {
		args := []string{"etcd", "--client-port=0", "--peer-port=0", "--data-dir", t.TempDir(), flag, strconv.Itoa(busy)}
		code, stdout, stderr := runDisco(t, 30*time.Second, args...)
		want := "disco: etcd: port " + strconv.Itoa(busy) + " (" + flag + ") is in use; --client-port 0 --peer-port 0 picks free ports\n"
		if code != exitFailure || stderr != want || stdout != "" {
			t.Errorf("%s %d in use: status %d, stdout %q, stderr %q; want %d and stderr %q", flag, busy, code, stdout, stderr, exitFailure, want)
		}
	}
}

// 'disco etcd --help' lists the flags it uses, not the global ones of the
// commands that use a service.
func TestEtcdHelpListsItsFlags(t *testing.T) {
	code, stdout, _ := runDisco(t, 10*time.Second, "etcd", "--help")
	if code != 0 {
		t.Fatalf("status %d", code)
	}
	for _, f := range []string{"--client-port", "--peer-port", "--data-dir", "--unsafe-no-fsync", "--log-level"} {
		if !strings.Contains(stdout, f) {
			t.Errorf("help lacks %s:\n%s", f, stdout)
		}
	}
	for _, f := range []string{"--endpoints", "--ttl", "--json", "--dial-timeout", "--command-timeout", "--verbose", "Global Flags"} {
		if strings.Contains(stdout, f) {
			t.Errorf("help lists %s, which etcd does not use:\n%s", f, stdout)
		}
	}
	// The other commands' help still lists the global flags.
	if _, stdout, _ := runDisco(t, 10*time.Second, "status", "--help"); !strings.Contains(stdout, "--endpoints") {
		t.Errorf("status --help lacks --endpoints:\n%s", stdout)
	}
}
