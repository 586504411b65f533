// Package storetest checks a guard.MarkStore implementation: the laws every
// store keeps (Run) and restart safety after its process is killed in the
// middle of raising a mark (Crash). disco runs it on each of its stores; a
// user writing a store can run it too.
package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
)

// Run checks the laws of a MarkStore on s: unknown scopes load 0, Raise
// raises and never lowers, scopes are independent, a nil context is
// refused with primitives.ErrInvalidArgument and writes nothing,
// concurrent raises end at the highest, RaiseLoad (if s is a
// guard.RaiseLoader) reports the stored mark, and a guard on s rejects a
// token below a mark it raised.
// prefix is prepended to every scope it uses, so runs can share a store.
func Run(t *testing.T, s guard.MarkStore, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := prefix+"/a", prefix+"/b ü%"
	load := func(scope string) fencing.Token {
		t.Helper()
		m, err := s.Load(ctx, scope)
		if err != nil {
			t.Fatalf("Load(%q): %v", scope, err)
		}
		return m
	}
	raise := func(scope string, tok fencing.Token) {
		t.Helper()
		if err := s.Raise(ctx, scope, tok); err != nil {
			t.Fatalf("Raise(%q, %d): %v", scope, tok, err)
		}
	}
	if m := load(a); m != 0 {
		t.Fatalf("mark of an unknown scope = %d, want 0", m)
	}
	raise(a, 5)
	raise(a, 3)
	raise(a, 5)
	if m := load(a); m != 5 {
		t.Fatalf("after raises 5, 3, 5: mark %d, want 5", m)
	}
	raise(b, 2)
	raise(a, 9)
	if ma, mb := load(a), load(b); ma != 9 || mb != 2 {
		t.Fatalf("marks a=%d b=%d, want 9 and 2", ma, mb)
	}
	if err := s.Raise(ctx, a, 0); err == nil {
		t.Error("Raise with token 0 succeeded")
	}
	if m := load(a); m != 9 {
		t.Fatalf("after a bad raise: mark %d, want 9", m)
	}

	// A nil context is bad input: refused, nothing written.
	var noContext context.Context
	if _, err := s.Load(noContext, a); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("Load with a nil context: %v, want an error wrapping ErrInvalidArgument", err)
	}
	if err := s.Raise(noContext, a, 50); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("Raise with a nil context: %v, want an error wrapping ErrInvalidArgument", err)
	}
	if rl, ok := s.(guard.RaiseLoader); ok {
		if _, err := rl.RaiseLoad(noContext, a, 50); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("RaiseLoad with a nil context: %v, want an error wrapping ErrInvalidArgument", err)
		}
	}
	if m := load(a); m != 9 {
		t.Fatalf("after calls with a nil context: mark %d, want 9", m)
	}

	// Concurrent raises: the highest wins.
	c := prefix + "/concurrent"
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			if err := s.Raise(ctx, c, fencing.Token(100+i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Raise: %v", err)
	}
	if m := load(c); m != 115 {
		t.Fatalf("after concurrent raises up to 115: mark %d", m)
	}

	// RaiseLoad, if the store has it, reports the stored mark after the raise.
	if rl, ok := s.(guard.RaiseLoader); ok {
		raiseLoad := func(tok, want fencing.Token) {
			t.Helper()
			m, err := rl.RaiseLoad(ctx, c, tok)
			if err != nil || m != want {
				t.Fatalf("RaiseLoad(%q, %d) = %d, %v; want %d", c, tok, m, err, want)
			}
		}
		raiseLoad(100, 115) // below the mark: the mark stays, and is told
		raiseLoad(115, 115)
		raiseLoad(200, 200)
		if m := load(c); m != 200 {
			t.Fatalf("after RaiseLoad to 200: mark %d", m)
		}
		if _, err := rl.RaiseLoad(ctx, c, 0); err == nil {
			t.Error("RaiseLoad with token 0 succeeded")
		}
		if m := load(c); m != 200 {
			t.Fatalf("after a bad RaiseLoad: mark %d, want 200", m)
		}
	}

	// A guard restarted on the store keeps the mark.
	k := guard.NewKeyed(guard.WithStore(s))
	if err := k.Check(a, 8); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("fresh keyed guard on the store: Check(8) below stored 9: %v", err)
	}
	if err := k.Check(a, 12); err != nil {
		t.Fatal(err)
	}
	if m := load(a); m != 12 {
		t.Fatalf("a keyed guard accepted 12 but the store holds %d", m)
	}
}

// childEnv names the test a child process runs as the crashing writer;
// argEnv carries its argument.
const (
	childEnv = "DISCO_STORETEST_CHILD"
	argEnv   = "DISCO_STORETEST_ARG"
)

// IsChild reports whether this process is a child that Crash or Fleet
// started. A test that sets up a server before calling Crash or Fleet
// skips that set-up in the child, where their arg is used instead.
func IsChild() bool { return os.Getenv(childEnv) != "" || os.Getenv(fleetChildEnv) != "" }

// Crash checks restart safety: in five rounds, a child process (this test
// binary, re-run for this test only) raises the mark of one scope through a
// guard on the store opened by open(arg), token after token, reporting each
// token the guard accepted, and is killed with SIGKILL at a random point,
// mostly in the middle of a raise. After each kill a guard built on a store
// freshly opened by open(arg) must hold a mark at least the last reported
// token and reject the token before it: the zombie. env is added to the
// child's environment.
//
// Call it as the whole body of a test: in the child process it never
// returns.
func Crash(t *testing.T, arg string, env []string, open func(arg string) (guard.MarkStore, func(), error)) {
	t.Helper()
	const scope = "/storetest/crash"
	if os.Getenv(childEnv) == t.Name() {
		crashChild(os.Getenv(argEnv), scope, open)
		return
	}
	for round := range 5 {
		last := crashRound(t, arg, env, rand.IntN(12)+2) // at least 2: the zombie is last-1 > 0
		s, closeStore, err := open(arg)
		if err != nil {
			t.Fatalf("round %d: reopening the store: %v", round, err)
		}
		g := guard.NewKeyed(guard.WithStore(s))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := g.MarkContext(ctx, scope)
		cancel()
		if err != nil {
			closeStore()
			t.Fatalf("round %d: loading the mark after the kill: %v", round, err)
		}
		if m < last {
			closeStore()
			t.Fatalf("round %d: child reported token %d accepted, store holds %d after the kill", round, last, m)
		}
		if err := g.Check(scope, last-1); !errors.Is(err, fencing.ErrTokenStale) {
			closeStore()
			t.Fatalf("round %d: zombie token %d after a kill at mark %d: %v, want stale", round, last-1, m, err)
		}
		closeStore()
	}
}

// crashRound runs one child, kills it after it reported n accepted tokens,
// and returns the last one it reported.
func crashRound(t *testing.T, arg string, env []string, n int) fencing.Token {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env...), childEnv+"="+t.Name(), argEnv+"="+arg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var last fencing.Token
	sc := bufio.NewScanner(out)
	for seen := 0; seen < n && sc.Scan(); {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "accepted "); ok {
			tok, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("child said %q", line)
			}
			last = fencing.Token(tok)
			seen++
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if last == 0 {
		t.Fatalf("child reported nothing; stderr: %s", stderr.String())
	}
	return last
}

func crashChild(arg, scope string, open func(string) (guard.MarkStore, func(), error)) {
	s, _, err := open(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storetest child:", err)
		os.Exit(2)
	}
	g := guard.NewKeyed(guard.WithStore(s))
	ctx := context.Background()
	m, err := g.MarkContext(ctx, scope)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storetest child:", err)
		os.Exit(2)
	}
	for tok := m + 1; ; tok++ {
		if err := g.Check(scope, tok); err != nil {
			fmt.Fprintln(os.Stderr, "storetest child:", err)
			os.Exit(2)
		}
		fmt.Printf("accepted %d\n", tok)
	}
}
