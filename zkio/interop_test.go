package zkio_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

// curatorInstall installs what the interop tests need beside ZooKeeper.
const curatorInstall = "apt-get install libcurator-recipes-java default-jdk-headless"

// curatorClasspath compiles testdata/CuratorPeer.java once per test and
// returns the classpath to run it with (or skips the test).
func curatorClasspath(t *testing.T) string {
	t.Helper()
	curator.once.Do(func() { curator.cp, curator.missing, curator.err = compileCurator() })
	if curator.missing {
		testserver.Missing(t, "Apache Curator (with a JDK)", curatorInstall)
	}
	if curator.err != nil {
		t.Fatal(curator.err)
	}
	return curator.cp
}

// curator is the compiled CuratorPeer, shared by the tests.
var curator struct {
	once    sync.Once
	cp      string
	missing bool
	err     error
}

func compileCurator() (cp string, missing bool, err error) {
	javac := testserver.LookPath("javac")
	recipes := testserver.FirstExisting("/usr/share/java/curator-recipes.jar")
	if javac == "" || recipes == "" || testserver.ZooKeeperClasspath() == "" {
		return "", true, nil
	}
	cp = recipes + string(os.PathListSeparator) + testserver.ZooKeeperClasspath()
	out, err := os.MkdirTemp(shared.dir, "curator-")
	if err != nil {
		return "", false, err
	}
	cmd := exec.Command(javac, "-nowarn", "-cp", cp, "-d", out, filepath.Join("testdata", "CuratorPeer.java"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("javac: %v\n%s", err, b)
	}
	return out + string(os.PathListSeparator) + cp, false, nil
}

// peer is a running CuratorPeer.
type peer struct {
	stdin io.WriteCloser
	lines chan string
}

func startPeer(t *testing.T, cp string, args ...string) *peer {
	t.Helper()
	cmd := exec.Command("java", append([]string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", cp, "CuratorPeer"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &peer{stdin: stdin, lines: make(chan string, 100)}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-scanned
		_ = cmd.Wait()
	})
	return p
}

// expect waits for the peer to print want.
func (p *peer) expect(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("Curator peer exited before printing %q", want)
			}
			if l == want {
				return
			}
		case <-deadline:
			t.Fatalf("Curator peer did not print %q within 20s", want)
		}
	}
}

// quiet fails t if the peer printed anything (it should be waiting).
func (p *peer) quiet(t *testing.T, what string) {
	t.Helper()
	select {
	case l := <-p.lines:
		t.Fatalf("%s: Curator peer printed %q", what, l)
	default:
	}
}

func (p *peer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, line); err != nil {
		t.Fatal(err)
	}
}

// queued waits until path has n children: the contenders have queued.
func queued(t *testing.T, servers []string, path string, n int) {
	t.Helper()
	admin := adminConn(t, servers)
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("%d children of %s", n, path), func() bool {
		children, _, err := admin.Children(path)
		return err == nil && len(children) == n
	})
}

// TestInteropCuratorMutex: a disco lock and Curator's InterProcessMutex on
// the same path exclude each other, in the order they queued.
func TestInteropCuratorMutex(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	cp := curatorClasspath(t)
	const path = "/interop/mutex"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, zkio.WithSessionTimeout(5*time.Second)))

	// disco first: Curator waits behind it.
	g1, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur := startPeer(t, cp, "mutex", servers[0], path)
	cur.expect(t, "WAITING")
	queued(t, servers, path, 2)
	cur.quiet(t, "while disco holds the lock")
	if err := l.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	cur.expect(t, "ACQUIRED")

	// Curator holds: disco's TryLock fails, its Lock waits behind Curator.
	if _, err := l.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock while Curator holds: %v, want ErrLockTaken", err)
	}
	got := make(chan error, 1)
	go func() {
		g, err := l.Lock(ctx)
		if err == nil && g.Token() <= g1.Token() {
			err = fmt.Errorf("token %d after %d", g.Token(), g1.Token())
		}
		got <- err
	}()
	queued(t, servers, path, 2)
	select {
	case err := <-got:
		t.Fatalf("disco's Lock returned while Curator holds: %v", err)
	default:
	}
	cur.send(t, "release")
	cur.expect(t, "RELEASED")
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestInteropCuratorLeaderLatch: a disco election and Curator's LeaderLatch
// on the same path agree on who leads.
func TestInteropCuratorLeaderLatch(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	cp := curatorClasspath(t)
	const path = "/interop/latch"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(servers, path, zkio.WithSessionTimeout(5*time.Second)))

	// Curator first: disco sees it lead, with its id as the value.
	cur := startPeer(t, cp, "latch", servers[0], path, "curator-1")
	cur.expect(t, "LEADER")
	ld, err := e.Leader(ctx)
	if err != nil || ld.Value != "curator-1" || !strings.Contains(ld.Key, "-latch-") {
		t.Fatalf("disco sees leader %+v, %v; want Curator's", ld, err)
	}
	won := make(chan error, 1)
	go func() { won <- e.Campaign(ctx, "disco") }()
	queued(t, servers, path, 2)
	select {
	case err := <-won:
		t.Fatalf("disco's Campaign returned while Curator leads: %v", err)
	default:
	}
	cur.send(t, "close")
	cur.expect(t, "CLOSED")
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	term, _ := e.Term()

	// disco leads: a new Curator participant agrees, and waits.
	cur2 := startPeer(t, cp, "latch", servers[0], path, "curator-2")
	cur2.expect(t, "STARTED")
	queued(t, servers, path, 2)
	cur2.send(t, "leader")
	cur2.expect(t, "IS disco")
	cur2.quiet(t, "while disco leads")
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cur2.expect(t, "LEADER")
	ld, err = e.Leader(ctx)
	if err != nil || ld.Value != "curator-2" || ld.Token() <= term.Token() {
		t.Fatalf("disco sees leader %+v, %v after resigning; want curator-2 above token %d", ld, err, term.Token())
	}
}

// TestInteropCuratorBarrier: a disco barrier and Curator's
// DistributedBarrier on the same path are one barrier, whichever side
// holds it.
func TestInteropCuratorBarrier(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	cp := curatorClasspath(t)
	const path = "/interop/barrier"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	b, err := zkio.NewBarrier(servers, path, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cur := startPeer(t, cp, "barrier", servers[0], path)
	cur.expect(t, "STARTED")

	// disco holds: Curator waits until disco releases.
	if err := b.Hold(ctx); err != nil {
		t.Fatal(err)
	}
	cur.send(t, "wait")
	brief, cancelBrief := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelBrief()
	if err := b.Wait(brief); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("disco's Wait on its own held barrier: %v", err)
	}
	cur.quiet(t, "while disco holds the barrier")
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	cur.expect(t, "PASSED")

	// Curator holds: disco's Hold is refused, its Wait waits for Curator's
	// remove.
	cur.send(t, "set")
	cur.expect(t, "SET")
	if err := b.Hold(ctx); !errors.Is(err, barrier.ErrHeld) {
		t.Fatalf("Hold while Curator holds: %v, want ErrHeld", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- b.Wait(ctx) }()
	brief2, cancelBrief2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelBrief2()
	if err := b.Wait(brief2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("disco's Wait while Curator holds: %v", err)
	}
	cur.send(t, "remove")
	cur.expect(t, "REMOVED")
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx); !errors.Is(err, barrier.ErrNotHeld) {
		t.Fatalf("Release after Curator's remove: %v, want ErrNotHeld", err)
	}
}

// TestInteropCuratorDoubleBarrier: a disco party and a Curator
// DistributedDoubleBarrier party on the same path and count enter together
// and leave together, whichever side comes last.
func TestInteropCuratorDoubleBarrier(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	cp := curatorClasspath(t)
	const path = "/interop/double"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(servers, path, 2, zkio.WithSessionTimeout(5*time.Second)))
	cur := startPeer(t, cp, "double", servers[0], path, "2")
	cur.expect(t, "STARTED")
	// call runs f on its own goroutine; its error arrives on the channel.
	call := func(f func(context.Context) error) <-chan error {
		ch := make(chan error, 1)
		go func() { ch <- f(ctx) }()
		return ch
	}
	pending := func(ch <-chan error, what string) {
		t.Helper()
		select {
		case err := <-ch:
			t.Fatalf("%s returned while the Curator party is missing: %v", what, err)
		default:
		}
	}
	for round := range 2 {
		// Round 0: disco enters and leaves first, Curator last; round
		// 1 the other way round.
		if round == 0 {
			entered := call(d.Enter)
			queued(t, servers, path, 1)
			pending(entered, "disco's Enter")
			cur.send(t, "enter")
			cur.expect(t, "ENTERING")
			cur.expect(t, "ENTERED")
			if err := <-entered; err != nil {
				t.Fatal(err)
			}
			left := call(d.Leave)
			pending(left, "disco's Leave")
			cur.send(t, "leave")
			cur.expect(t, "LEAVING")
			cur.expect(t, "LEFT")
			if err := <-left; err != nil {
				t.Fatal(err)
			}
			continue
		}
		cur.send(t, "enter")
		cur.expect(t, "ENTERING")
		queued(t, servers, path, 1)
		cur.quiet(t, "Curator's enter while disco is missing")
		if err := d.Enter(ctx); err != nil {
			t.Fatal(err)
		}
		cur.expect(t, "ENTERED")
		cur.send(t, "leave")
		cur.expect(t, "LEAVING")
		cur.quiet(t, "Curator's leave while disco stays")
		if err := d.Leave(ctx); err != nil {
			t.Fatal(err)
		}
		cur.expect(t, "LEFT")
	}
}

// TestInteropCuratorSemaphore: a disco semaphore and Curator's
// InterProcessSemaphoreV2 on the same path and number of permits share the
// permits, whichever side holds first.
func TestInteropCuratorSemaphore(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	cp := curatorClasspath(t)
	const path = "/interop/semaphore"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	sem := testkit.ClosedAtEnd[semaphore.Service](t)(zkio.NewSemaphore(servers, path, 1, zkio.WithSessionTimeout(5*time.Second)))
	cur := startPeer(t, cp, "semaphore", servers[0], path, "1")
	cur.expect(t, "STARTED")

	// disco holds: Curator waits until disco releases.
	g1, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur.send(t, "acquire")
	cur.expect(t, "WAITING")
	queued(t, servers, path+"/leases", 2)
	cur.quiet(t, "while disco holds the permit")
	if err := sem.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	cur.expect(t, "ACQUIRED")

	// Curator holds: disco's TryAcquire is refused, its Acquire waits.
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, semaphore.ErrNoPermit) {
		t.Fatalf("TryAcquire while Curator holds: %v, want ErrNoPermit", err)
	}
	got := make(chan error, 1)
	go func() {
		g, err := sem.Acquire(ctx)
		if err == nil && g.Token() <= g1.Token() {
			err = fmt.Errorf("token %d after %d", g.Token(), g1.Token())
		}
		if err == nil {
			err = sem.Release(ctx, g)
		}
		got <- err
	}()
	queued(t, servers, path+"/leases", 2)
	select {
	case err := <-got:
		t.Fatalf("disco's Acquire returned while Curator holds: %v", err)
	default:
	}
	cur.send(t, "release")
	cur.expect(t, "RELEASED")
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
