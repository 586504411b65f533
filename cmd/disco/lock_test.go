package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/primitives/lock"
)

// holdScript prints the token and scope disco gave it, then holds until its
// standard input closes, and exits with status 5.
const holdScript = `echo "token=$FENCING_TOKEN scope=$FENCING_SCOPE"; read line; exit 5`

var tokenRE = regexp.MustCompile(`token=(\d+)`)

func tokenIn(t *testing.T, s string) int64 {
	t.Helper()
	m := tokenRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no token in %q", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A holder of another kind holds first: disco waits behind it; once it
// lets go, disco runs CMD with a higher token, and while CMD runs the other
// kinds cannot take the lock. disco exits with CMD's status and leaves no key.
func TestLockExcludesOtherHolders(t *testing.T) {
	type holder struct {
		lock   func(ctx context.Context) (token int64, unlock func())
		tryErr func(ctx context.Context) error // nil if it got the lock
	}
	for _, tc := range []struct {
		kind string
		make func(t *testing.T, cli *clientv3.Client, name string) holder
	}{
		{"library", func(t *testing.T, cli *clientv3.Client, name string) holder {
			l, err := etcdio.NewLock(cli, name, etcdio.WithTTL(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return holder{
				lock: func(ctx context.Context) (int64, func()) {
					g, err := l.Lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					return int64(g.FencingToken), func() {
						if err := l.Unlock(ctx); err != nil {
							t.Fatal(err)
						}
					}
				},
				tryErr: func(ctx context.Context) error {
					_, err := l.TryLock(ctx)
					if err == nil {
						_ = l.Unlock(ctx)
					} else if !errors.Is(err, lock.ErrLockTaken) {
						t.Fatal(err)
					}
					return err
				},
			}
		}},
		{"concurrency.Mutex", func(t *testing.T, cli *clientv3.Client, name string) holder {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			m := concurrency.NewMutex(s, name)
			return holder{
				lock: func(ctx context.Context) (int64, func()) {
					if err := m.Lock(ctx); err != nil {
						t.Fatal(err)
					}
					return m.Header().Revision, func() {
						if err := m.Unlock(ctx); err != nil {
							t.Fatal(err)
						}
					}
				},
				tryErr: func(ctx context.Context) error {
					err := m.TryLock(ctx)
					if err == nil {
						_ = m.Unlock(ctx)
					} else if !errors.Is(err, concurrency.ErrLocked) {
						t.Fatal(err)
					}
					return err
				},
			}
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			noLeaks(t)
			name := nameOf(t)
			ctx := testCtx(t, 20*time.Second)
			cli := newClient(t)
			h := tc.make(t, cli, name)
			theirs, unlock := h.lock(ctx)

			p := startDisco(t, "lock", name, "--", "sh", "-c", holdScript)
			awaitKeys(t, cli, name, 2) // disco waits behind the holder
			if out := p.stdout.String(); out != "" {
				t.Fatalf("CMD ran while %s held the lock: %q", tc.kind, out)
			}
			unlock()
			out := p.stdout.await(t, "scope="+name, 5*time.Second)
			if ours := tokenIn(t, out); ours <= theirs {
				t.Fatalf("disco's token %d, not above the previous holder's %d", ours, theirs)
			}
			if err := h.tryErr(ctx); err == nil {
				t.Fatalf("%s took the lock while disco's CMD ran", tc.kind)
			}
			p.stdin.Close() // CMD exits with 5
			if code := p.wait(t, 5*time.Second); code != 5 || p.stderr.String() != "" {
				t.Fatalf("exit status %d, want CMD's 5 and nothing on stderr; stderr:\n%s", code, p.stderr)
			}
			awaitKeys(t, cli, name, 0)
		})
	}
}

// When the lease of disco's lock is revoked, CMD (which ignores SIGTERM)
// and its children are killed within a second, disco exits with status 3,
// and the next holder gets a higher token.
func TestLockLostTerminatesCommand(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	const script = `trap "" TERM; echo "token=$FENCING_TOKEN pid=$$"; while :; do sleep 0.05; done`
	p := startDisco(t, "lock", "--grace", "200ms", name, "--", "sh", "-c", script)
	out := p.stdout.await(t, "pid=", 10*time.Second)
	ours := tokenIn(t, out)
	pid, err := strconv.Atoi(regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(out)[1])
	if err != nil {
		t.Fatal(err)
	}

	// The next holder queues behind disco.
	next, err := etcdio.NewLock(cli, name, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	granted := make(chan lock.Grant, 1)
	go func() {
		g, err := next.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		granted <- g
	}()
	awaitKeys(t, cli, name, 2)

	resp, err := cli.Get(ctx, name+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Second); code != exitLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("disco took %v after the revoke to end CMD", took)
	}
	if live := groupMembers(t, pid); len(live) > 0 {
		t.Fatalf("CMD's process group %d still has live processes after disco exited: %v", pid, live)
	}
	t.Logf("stderr: %s", p.stderr.await(t, "lost", time.Second))
	if g := <-granted; int64(g.FencingToken) <= ours {
		t.Fatalf("next holder's token %d, not above disco's %d", g.FencingToken, ours)
	}
}

// SIGTERM to disco reaches CMD; disco then exits with CMD's status.
func TestLockForwardsSignals(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	const script = `trap 'echo got TERM; exit 9' TERM; echo ready; while :; do sleep 0.05; done`
	p := startDisco(t, "lock", name, "--", "sh", "-c", script)
	p.stdout.await(t, "ready", 10*time.Second)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 5*time.Second); code != 9 {
		t.Fatalf("exit status %d, want CMD's 9; stderr:\n%s", code, p.stderr)
	}
	p.stdout.await(t, "got TERM", time.Second)
	awaitKeys(t, newClient(t), name, 0)
}

// SIGINT while disco waits ends the wait with status 130 and leaves no key.
func TestLockInterruptedWhileWaiting(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	l, err := etcdio.NewLock(cli, name, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Lock(testCtx(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	p := startDisco(t, "lock", name, "--", "sh", "-c", "echo ran")
	awaitKeys(t, cli, name, 2)
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 128+int(syscall.SIGINT) {
		t.Fatalf("exit status %d, want 130; stderr:\n%s", code, p.stderr)
	}
	if out := p.stdout.String(); out != "" {
		t.Fatalf("CMD ran: %q", out)
	}
	awaitKeys(t, cli, name, 1)
}

// groupMembers returns the processes of process group pgid that are not
// zombies (killed processes whose parent has not reaped them yet), as
// "pid state" strings, from /proc.
func groupMembers(t *testing.T, pgid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 3 || fields[2] != strconv.Itoa(pgid) || fields[0] == "Z" || fields[0] == "X" {
			continue
		}
		live = append(live, strings.Fields(s)[0]+" "+fields[0])
	}
	return live
}

// TestWaiterLostBeforeGrant: a waiter whose key is deleted before it was
// ever granted did not lose a hold: CMD never ran, and disco exits 1 (its
// wait failed), not 3 (lost while CMD ran), saying so.
func TestWaiterLostBeforeGrant(t *testing.T) {
	cli := newClient(t)
	for _, kind := range []string{"lock", "elect"} {
		t.Run(kind, func(t *testing.T) {
			name := nameOf(t)
			args := func(value, script string) []string {
				if kind == "lock" {
					return []string{"lock", "--value", value, name, "--", "sh", "-c", script}
				}
				return []string{"elect", name, value, "--", "sh", "-c", script}
			}
			holder := startDisco(t, args("holder", "echo held; read x")...)
			holder.stdout.await(t, "held", 10*time.Second)
			waiter := startDisco(t, args("waiter", "echo ran")...)
			keys := awaitKeys(t, cli, name, 2)
			if _, err := cli.Delete(testCtx(t, 5*time.Second), keys[1]); err != nil {
				t.Fatal(err)
			}
			code := waiter.wait(t, 10*time.Second)
			holder.stdin.Close()
			holder.wait(t, 10*time.Second)
			if code != exitFailure || strings.Contains(waiter.stderr.String(), "while CMD ran") || !strings.Contains(waiter.stderr.String(), "CMD did not run") || waiter.stdout.String() != "" {
				t.Errorf("a waiter whose key was deleted before any grant: exit %d, stdout %q, stderr %q; want exit %d saying CMD did not run", code, waiter.stdout, waiter.stderr, exitFailure)
			}
		})
	}
}
