package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

// fleetChildEnv names the test a child process runs as a replica of
// Fleet; the store's arg is in argEnv.
const fleetChildEnv = "DISCO_STORETEST_FLEET_CHILD"

// Fleet checks that guards sharing one store fence as one resource (the
// replicas of a resource behind a load balancer): a token below a token
// any of them accepted is rejected by every one of them. Each replica has
// a store of its own, opened by open(arg) (its own connection, its own
// File value), over the same marks.
//
//   - Sequential: with two and then three replicas, plain and keyed
//     guards, random tokens around the highest accepted one are sent to
//     random replicas; each is accepted exactly if it is at least the
//     highest accepted so far. A replica restarted on a freshly opened
//     store keeps that. Once through RaiseLoad (if the store has it), once
//     through the fallback (Raise, then Load).
//   - Concurrent: three replicas, goroutines sending rising tokens; a token
//     below one that any replica accepted before it was sent is never
//     accepted.
//   - Processes: two replicas in child processes (this test binary, re-run
//     for this test only) and one in this process, as Sequential, with a
//     child killed and started again midway: a real second process raises
//     the mark.
//   - Faults: a replica whose store hangs (ignoring its context) or fails
//     rejects within its store timeout, with ErrStore and metrics reason
//     "store", for a token equal to its mark (a read) and one above it (a
//     raise), and its mark does not move; once the store answers, it
//     accepts again.
//
// env is added to the children's environment. Call it as the whole body of
// a test: in a child process it never returns.
func Fleet(t *testing.T, arg string, env []string, open func(arg string) (guard.MarkStore, func(), error)) {
	t.Helper()
	if os.Getenv(fleetChildEnv) == t.Name() {
		fleetChild(os.Getenv(argEnv), open)
		return
	}
	prefix := fmt.Sprintf("/storetest/fleet/%d", time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 27))
	openStore := func(t *testing.T, hide bool) (guard.MarkStore, func()) {
		t.Helper()
		s, closeStore, err := open(arg)
		if err != nil {
			t.Fatalf("opening the store: %v", err)
		}
		if hide {
			s = struct{ guard.MarkStore }{s} // Load and Raise only
		}
		return s, closeStore
	}
	for _, hide := range []bool{false, true} {
		name := "Sequential"
		if hide {
			name = "SequentialFallback"
		}
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{2, 3} {
				reps := make([]replica, n)
				for i := range reps {
					reps[i] = newInProc(openStore(t, hide))
				}
				restart := func(i int) {
					reps[i].close()
					reps[i] = newInProc(openStore(t, hide))
				}
				for _, scope := range []string{"", fmt.Sprintf("%s/seq/%v/%d", prefix, hide, n)} {
					sequence(t, reps, scope, rng, restart)
				}
				for _, r := range reps {
					r.close()
				}
			}
		})
	}
	t.Run("Concurrent", func(t *testing.T) {
		fleetConcurrent(t, prefix+"/concurrent", func() (guard.MarkStore, func()) { return openStore(t, false) })
	})
	name := t.Name() // the test the children run
	t.Run("Processes", func(t *testing.T) {
		reps := []replica{startChild(t, name, arg, env), startChild(t, name, arg, env), newInProc(openStore(t, false))}
		defer func() {
			for _, r := range reps {
				r.close()
			}
		}()
		restart := func(i int) {
			reps[i].close()
			if i == len(reps)-1 {
				reps[i] = newInProc(openStore(t, false))
			} else {
				reps[i] = startChild(t, name, arg, env)
			}
		}
		for _, scope := range []string{"", prefix + "/processes"} {
			sequence(t, reps, scope, rng, restart)
		}
	})
	t.Run("Faults", func(t *testing.T) {
		fleetFaults(t, prefix+"/faults", func() (guard.MarkStore, func()) { return openStore(t, false) })
	})
}

// replica is one guard of a fleet: a plain Guard (scope "") and a Keyed
// guard (any other scope) on one store.
type replica interface {
	check(scope string, t fencing.Token) error
	close()
}

// inProc is a replica in this process.
type inProc struct {
	g          *guard.Guard
	k          *guard.Keyed
	closeStore func()
}

func newInProc(s guard.MarkStore, closeStore func()) *inProc {
	return &inProc{g: guard.New(guard.WithStore(s)), k: guard.NewKeyed(guard.WithStore(s)), closeStore: closeStore}
}

func (r *inProc) check(scope string, t fencing.Token) error {
	if scope == "" {
		return r.g.Check(t)
	}
	return r.k.Check(scope, t)
}

func (r *inProc) close() { r.closeStore() }

// sequence sends random tokens around the highest accepted one to random
// replicas, one at a time, and checks that each is accepted exactly if it
// is at least the highest accepted so far; midway it restarts one replica.
func sequence(t *testing.T, reps []replica, scope string, rng *rand.Rand, restart func(int)) {
	t.Helper()
	const steps = 40
	// The highest accepted so far: what the store holds for scope (earlier
	// runs may have raised it), accepted by replica 0.
	top := fencing.Token(1)
	for {
		err := reps[0].check(scope, top)
		if err == nil {
			break
		}
		if !errors.Is(err, fencing.ErrTokenStale) {
			t.Fatalf("replica 0: Check(%q, %d): %v", scope, top, err)
		}
		top *= 2
	}
	for i := range steps {
		if i == steps/2 {
			restart(rng.IntN(len(reps)))
		}
		r := rng.IntN(len(reps))
		tok := max(1, top+fencing.Token(rng.IntN(7))-3)
		err := reps[r].check(scope, tok)
		switch {
		case tok >= top && err != nil:
			t.Fatalf("step %d: replica %d rejected %d of scope %q, the highest accepted being %d: %v", i, r, tok, scope, top, err)
		case tok < top && !errors.Is(err, fencing.ErrTokenStale):
			t.Fatalf("step %d: replica %d: Check(%q, %d) below %d, accepted by a replica: %v, want stale", i, r, scope, tok, top, err)
		case tok >= top:
			top = tok
		}
	}
	// Every replica now rejects the token just below the top.
	if top > 1 {
		for r := range reps {
			if err := reps[r].check(scope, top-1); !errors.Is(err, fencing.ErrTokenStale) {
				t.Fatalf("replica %d: Check(%q, %d) below %d: %v, want stale", r, scope, top-1, top, err)
			}
		}
	}
}

// fleetConcurrent: three replicas, six goroutines checking slowly rising
// random tokens on random replicas. A token below one accepted (by any
// replica) before the check began is never accepted.
func fleetConcurrent(t *testing.T, scope string, open func() (guard.MarkStore, func())) {
	var reps [3]*guard.Keyed
	for i := range reps {
		s, closeStore := open()
		t.Cleanup(closeStore)
		reps[i] = guard.NewKeyed(guard.WithStore(s))
	}
	var enforced atomic.Int64
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 28))
			for i := range 40 {
				tok := fencing.Token(1 + i/2 + rng.IntN(4))
				before := enforced.Load()
				err := reps[rng.IntN(len(reps))].Check(scope, tok)
				switch {
				case err == nil && int64(tok) < before:
					t.Errorf("token %d accepted after %d was accepted by a replica", tok, before)
					return
				case err == nil:
					raiseTo(&enforced, int64(tok))
				case !errors.Is(err, fencing.ErrTokenStale):
					t.Errorf("Check(%d): %v", tok, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func raiseTo(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// faulty is a store whose Load and Raise, while it is shut, block until it
// opens (whatever their context says, as on a hung disk) or, if it fails,
// return an error at once.
type faulty struct {
	guard.MarkStore
	mu   sync.Mutex
	gate chan struct{} // nil: calls pass
	fail bool
}

var errBroken = errors.New("storetest: the store is broken")

func (f *faulty) set(gate chan struct{}, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate, f.fail = gate, fail
}

func (f *faulty) pass() error {
	f.mu.Lock()
	gate, fail := f.gate, f.fail
	f.mu.Unlock()
	if fail {
		return errBroken
	}
	if gate != nil {
		<-gate
	}
	return nil
}

func (f *faulty) Load(ctx context.Context, scope string) (fencing.Token, error) {
	if err := f.pass(); err != nil {
		return 0, err
	}
	return f.MarkStore.Load(ctx, scope)
}

func (f *faulty) Raise(ctx context.Context, scope string, t fencing.Token) error {
	if err := f.pass(); err != nil {
		return err
	}
	return f.MarkStore.Raise(ctx, scope, t)
}

// fleetFaults: see Fleet.
func fleetFaults(t *testing.T, scope string, open func() (guard.MarkStore, func())) {
	s, closeStore := open()
	t.Cleanup(closeStore)
	other := guard.NewKeyed(guard.WithStore(s))
	s2, closeStore2 := open()
	t.Cleanup(closeStore2)
	f := &faulty{MarkStore: s2}
	reg := prometheus.NewRegistry()
	m, err := guard.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	const bound = 300 * time.Millisecond
	k := guard.NewKeyed(guard.WithStore(f), guard.WithStoreTimeout(bound), guard.WithMetrics(m))
	if err := other.Check(scope, 10); err != nil {
		t.Fatal(err)
	}
	if err := k.Check(scope, 10); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(gate) }) }
	t.Cleanup(openGate) // no call stays blocked after the test, pass or fail
	want := 0
	for _, fail := range []bool{true, false} { // a hung call outlives its request: last
		what := "hangs"
		if fail {
			what = "fails"
		}
		f.set(gate, fail)
		for _, tok := range []fencing.Token{10, 11} {
			start := time.Now()
			err := k.Check(scope, tok)
			if d := time.Since(start); d > 10*bound {
				t.Fatalf("Check(%d) while the store %s took %v with a store timeout of %v", tok, what, d, bound)
			}
			if !errors.Is(err, guard.ErrStore) {
				t.Fatalf("Check(%d) while the store %s: %v, want ErrStore", tok, what, err)
			}
			want++
		}
		if got := Rejections(t, reg, guard.ReasonStore); got != float64(want) {
			t.Fatalf("%v rejections with reason store, want %d", got, want)
		}
		if mk := k.Mark(scope); mk != 10 {
			t.Fatalf("mark %d after rejections while the store %s, want 10", mk, what)
		}
	}
	f.set(nil, false)
	openGate()
	if err := k.Check(scope, 11); err != nil {
		t.Fatalf("Check(11) once the store answers: %v", err)
	}
	if err := other.Check(scope, 10); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the other replica: Check(10) below 11: %v, want stale", err)
	}
}

// Rejections returns the count of disco_guard_rejected_total{reason} that
// reg gathers (the metrics of a guard, guard.NewMetrics(reg)); t fails if
// there is none.
func Rejections(t testing.TB, reg prometheus.Gatherer, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "disco_guard_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no disco_guard_rejected_total{reason=%q}", reason)
	return 0
}

// child is a replica in a child process: it reads "<token> <quoted scope>"
// lines and answers each with "ok", "stale" or "error <text>".
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *strings.Builder
}

// startChild starts a replica in a child process that runs the test name
// (the one that called Fleet).
func startChild(t *testing.T, name, arg string, env []string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+strings.ReplaceAll(name, "/", "$/^")+"$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), env...), fleetChildEnv+"="+name, argEnv+"="+arg)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out), stderr: &strings.Builder{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *child) check(scope string, t fencing.Token) error {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.in, "%d %s\n", t, strconv.Quote(scope)); err != nil {
		c.t.Fatalf("child replica: %v; stderr: %s", err, c.stderr)
	}
	for c.out.Scan() {
		switch line := c.out.Text(); {
		case line == "ok":
			return nil
		case line == "stale":
			return fmt.Errorf("child replica: token %d: %w", t, fencing.ErrTokenStale)
		case strings.HasPrefix(line, "error "):
			return fmt.Errorf("child replica: token %d: %s", t, strings.TrimPrefix(line, "error "))
		}
		// Anything else is the test framework's own output.
	}
	c.t.Fatalf("child replica ended; stderr: %s", c.stderr)
	return nil
}

// close kills the child, as a crash of the replica would.
func (c *child) close() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

func fleetChild(arg string, open func(string) (guard.MarkStore, func(), error)) {
	s, _, err := open(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storetest fleet child:", err)
		os.Exit(2)
	}
	r := newInProc(s, func() {})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		tok, quoted, _ := strings.Cut(in.Text(), " ")
		t, err := strconv.ParseInt(tok, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "storetest fleet child: bad line", in.Text())
			os.Exit(2)
		}
		scope, err := strconv.Unquote(quoted)
		if err != nil {
			fmt.Fprintln(os.Stderr, "storetest fleet child: bad line", in.Text())
			os.Exit(2)
		}
		switch err := r.check(scope, fencing.Token(t)); {
		case err == nil:
			fmt.Println("ok")
		case errors.Is(err, fencing.ErrTokenStale):
			fmt.Println("stale")
		default:
			fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	os.Exit(0)
}
