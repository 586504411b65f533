package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio"
)

// grandchildScript starts a background sleep that outlives the shell unless
// someone kills it (its output goes nowhere, so that it does not hold
// disco's), writes its pid to the file $1, prints "ready", and then runs
// the rest of the script.
const grandchildScript = `sleep 200 >/dev/null 2>&1 & echo $! > "$1"; echo ready; `

// startGrandchild runs disco with args followed by "sh -c grandchildScript+rest"
// and returns the process and the pid of CMD's background child, killed
// (should it still live) when t ends.
func startGrandchild(t *testing.T, rest string, args ...string) (*proc, int) {
	t.Helper()
	pidfile := filepath.Join(t.TempDir(), "pid")
	args = append(args, "sh", "-c", grandchildScript+rest, "sh", pidfile)
	p := startDisco(t, args...)
	p.stdout.await(t, "ready", 10*time.Second)
	b, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(t, pid) {
		t.Fatalf("CMD's background child %d is not running", pid)
	}
	return p, pid
}

// alive says whether process pid runs: it exists and is not a zombie (a
// killed process its parent has not reaped yet).
func alive(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if os.IsNotExist(err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// awaitDead fails t unless process pid has ended within d.
func awaitDead(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for alive(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("CMD's background child %d still runs %v after disco's end", pid, d)
		}
		<-tick.C
	}
}

// When disco is killed with SIGKILL while CMD runs, CMD's background
// children die too, not only CMD.
func TestKilledDiscoStopsCommandGroup(t *testing.T) {
	for _, sub := range []string{"lock", "elect"} {
		t.Run(sub, func(t *testing.T) {
			noLeaks(t)
			name := nameOf(t)
			args := []string{sub, name, "--"}
			if sub == "elect" {
				args = []string{sub, name, "v", "--"}
			}
			p, pid := startGrandchild(t, "wait", args...)
			if err := p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			p.wait(t, 5*time.Second)
			awaitDead(t, pid, 5*time.Second)
		})
	}
}

// When CMD exits normally and leaves a background child running, disco
// kills that child before it releases the lock: the next holder gets the
// lock only once the child is dead.
func TestLockStopsCommandGroupBeforeRelease(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	p, pid := startGrandchild(t, "read line; exit 0", "lock", name, "--")
	next, err := etcdio.NewLock(cli, name, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	granted := make(chan error, 1)
	go func() {
		_, err := next.Lock(ctx)
		granted <- err
	}()
	awaitKeys(t, cli, name, 2) // the next holder waits behind disco
	p.stdin.Close()            // CMD exits, its child still running
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	if alive(t, pid) {
		t.Fatalf("the next holder got the lock while CMD's background child %d still ran", pid)
	}
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d, want CMD's 0; stderr:\n%s", code, p.stderr)
	}
}

// The same for elect: the next candidate leads only once CMD's background
// child is dead.
func TestElectStopsCommandGroupBeforeResign(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	ctx := testCtx(t, 20*time.Second)
	p, pid := startGrandchild(t, "read line; exit 0", "elect", name, "v1", "--")
	next := newCandidate(t, name)
	campaigned := make(chan error, 1)
	go func() { campaigned <- next.Campaign(ctx, "v2") }()
	awaitKeys(t, newClient(t), name, 2)
	p.stdin.Close()
	if err := <-campaigned; err != nil {
		t.Fatal(err)
	}
	if alive(t, pid) {
		t.Fatalf("the next candidate led while CMD's background child %d still ran", pid)
	}
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d, want CMD's 0; stderr:\n%s", code, p.stderr)
	}
	if err := next.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
}
