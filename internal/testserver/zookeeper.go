package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ZooKeeperInstall is the command that installs what StartZooKeeper needs.
const ZooKeeperInstall = "apt-get install zookeeper default-jre-headless"

// zooKeeperJar is the server jar of Debian's zookeeper package; its manifest
// names the jars it depends on.
const zooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeperClasspath returns the classpath of Debian's ZooKeeper server and
// client (logging silenced), or "" if it is not installed.
func ZooKeeperClasspath() string {
	if FirstExisting(zooKeeperJar) == "" {
		return ""
	}
	cp := []string{zooKeeperJar}
	if nop := FirstExisting("/usr/share/java/slf4j-nop.jar"); nop != "" {
		cp = append(cp, nop)
	}
	return strings.Join(cp, string(os.PathListSeparator))
}

// ZooKeeper is one real ZooKeeper server, or a member of an ensemble,
// started from Debian's jars on a loopback port.
type ZooKeeper struct {
	// Addr is the client address, "127.0.0.1:port".
	Addr string

	dir    string
	cfg    string
	jvm    ZooKeeperJVM
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *limitedWriter
}

// ZooKeeperTickTime is the servers' tick: sessions may time out between 2
// and 20 ticks (1 s to 10 s).
const ZooKeeperTickTime = 500 * time.Millisecond

// StartZooKeeper starts one ZooKeeper server with a fresh data directory,
// waits until it serves, and stops it when t ends. It skips t (or fails it
// under DISCO_REQUIRE_SERVERS=1) if ZooKeeper or Java is not installed.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	zks := StartZooKeeperEnsemble(t, 1)
	return zks[0]
}

// StartZooKeeperEnsemble starts n ZooKeeper servers forming one ensemble
// (n = 1: a standalone server), waits until every one serves, and stops
// them when t ends.
func StartZooKeeperEnsemble(t testing.TB, n int) []*ZooKeeper {
	t.Helper()
	zks, err := LaunchZooKeeper(t.TempDir(), n)
	if errors.Is(err, ErrNotInstalled) {
		Missing(t, "ZooKeeper (with a Java runtime)", ZooKeeperInstall)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, zk := range zks {
		t.Cleanup(zk.Stop)
	}
	return zks
}

// ErrNotInstalled is returned by LaunchZooKeeper when ZooKeeper or Java is
// missing.
var ErrNotInstalled = errors.New("testserver: not installed")

// ZooKeeperJVM is how the servers' Java virtual machine runs.
type ZooKeeperJVM int

const (
	// QuickJVM stays small, for tests: the JIT's first tier only (no CPU
	// spent on optimizing compiles while the tests run), the serial
	// collector, at most 256 MiB of heap.
	QuickJVM ZooKeeperJVM = iota
	// ServerJVM runs as Debian's zkServer.sh starts a server, with the
	// JVM's own defaults (both JIT tiers, its own collector and heap): it
	// spends CPU on optimizing compiles at first, then serves faster. For
	// benchmarks, whose figures must be a deployed server's.
	ServerJVM
)

// LaunchZooKeeper starts n ZooKeeper servers forming one ensemble with
// their data under root, for a TestMain that shares them between tests; the
// caller stops them. Their JVMs are QuickJVMs. It returns an error wrapping
// ErrNotInstalled if ZooKeeper or Java is missing (a test then calls
// Missing).
func LaunchZooKeeper(root string, n int) ([]*ZooKeeper, error) {
	return LaunchZooKeeperOn(root, n, QuickJVM)
}

// LaunchZooKeeperOn is LaunchZooKeeper with servers on jvm.
func LaunchZooKeeperOn(root string, n int, jvm ZooKeeperJVM) ([]*ZooKeeper, error) {
	java := LookPath("java")
	cp := ZooKeeperClasspath()
	if java == "" || cp == "" {
		return nil, fmt.Errorf("ZooKeeper (with a Java runtime): %w", ErrNotInstalled)
	}
	// The ports are reserved (no other test server or kernel-picked port
	// takes one), but a process that binds ports by number may hold one: try
	// again with fresh ones.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var zks []*ZooKeeper
		if zks, err = launchZooKeeper(filepath.Join(root, fmt.Sprint("try", attempt)), n, java, cp, jvm); err == nil {
			return zks, nil
		}
	}
	return nil, err
}

func launchZooKeeper(root string, n int, java, cp string, jvm ZooKeeperJVM) ([]*ZooKeeper, error) {
	type ports struct{ client, peer, election int }
	ps := make([]ports, n)
	picked, err := ReservePorts(3 * n)
	if err != nil {
		return nil, err
	}
	for i := range ps {
		ps[i] = ports{picked[3*i], picked[3*i+1], picked[3*i+2]}
	}
	zks := make([]*ZooKeeper, n)
	for i := range zks {
		dir := filepath.Join(root, fmt.Sprint("zk", i+1))
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "tickTime=%d\n", ZooKeeperTickTime.Milliseconds())
		fmt.Fprintf(&cfg, "dataDir=%s\n", data)
		fmt.Fprintf(&cfg, "clientPort=%d\nclientPortAddress=127.0.0.1\n", ps[i].client)
		cfg.WriteString("admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat\n")
		cfg.WriteString("initLimit=10\nsyncLimit=5\nforceSync=no\n")
		// Every client comes from 127.0.0.1: no cap per address (the
		// default is 60; bench opens one connection per contender).
		cfg.WriteString("maxClientCnxns=0\n")
		if n > 1 {
			for j, p := range ps {
				fmt.Fprintf(&cfg, "server.%d=127.0.0.1:%d:%d\n", j+1, p.peer, p.election)
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintln(i+1)), 0o644); err != nil {
				return nil, err
			}
		}
		path := filepath.Join(dir, "zoo.cfg")
		if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
			return nil, err
		}
		zks[i] = &ZooKeeper{Addr: fmt.Sprintf("127.0.0.1:%d", ps[i].client), dir: dir, cfg: path, jvm: jvm}
	}
	stopAll := func() {
		for _, zk := range zks {
			zk.Stop()
		}
	}
	for _, zk := range zks {
		if err := zk.start(java, cp); err != nil {
			stopAll()
			return nil, err
		}
	}
	for _, zk := range zks {
		if err := zk.waitServing(30 * time.Second); err != nil {
			stopAll()
			return nil, err
		}
	}
	return zks, nil
}

func (z *ZooKeeper) start(java, cp string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	main := "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	var args []string
	if z.jvm == QuickJVM {
		args = []string{"-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}
	}
	args = append(args, "-Dzookeeper.jmx.log4j.disable=true", "-cp", cp, main, z.cfg)
	cmd := exec.Command(java, args...)
	z.stderr = &limitedWriter{left: 64 << 10}
	cmd.Stdout = io.Discard
	cmd.Stderr = z.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start ZooKeeper: %w", err)
	}
	z.cmd = cmd
	z.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(z.exited) }()
	return nil
}

// waitServing polls the server with the "srvr" four-letter word until it
// answers as a serving member.
func (z *ZooKeeper) waitServing(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		out, err := FourLetter(z.Addr, "srvr")
		if err == nil && strings.Contains(out, "Mode: ") {
			return nil
		}
		select {
		case <-z.exited:
			return fmt.Errorf("ZooKeeper at %s exited: %s", z.Addr, z.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ZooKeeper at %s not serving within %v (last: %q, %v)", z.Addr, limit, out, err)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// FourLetter sends a ZooKeeper four-letter command to addr and returns the
// answer.
func FourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	return string(b), err
}

// Stop kills the server and waits for it to exit. Its data stays, so
// Restart brings it back with the same state.
func (z *ZooKeeper) Stop() {
	z.mu.Lock()
	cmd, exited := z.cmd, z.exited
	z.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart starts a stopped server again and waits until it serves.
func (z *ZooKeeper) Restart(t testing.TB) {
	t.Helper()
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
}

// Start is Restart for code that has no testing.TB: it starts a stopped
// server again and waits (up to 30 s) until it serves.
func (z *ZooKeeper) Start() error {
	if err := z.start(LookPath("java"), ZooKeeperClasspath()); err != nil {
		return err
	}
	return z.waitServing(30 * time.Second)
}

// Running reports whether the server's process runs (started and not
// stopped, whether or not it serves yet).
func (z *ZooKeeper) Running() bool {
	z.mu.Lock()
	exited := z.exited
	z.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// limitedWriter keeps at most left bytes.
type limitedWriter struct {
	mu   sync.Mutex
	w    strings.Builder
	left int
}

func (l *limitedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := min(len(p), l.left); n > 0 {
		l.w.Write(p[:n])
		l.left -= n
	}
	return len(p), nil
}

// Output returns the start of what the server wrote to stderr, for
// diagnosis.
func (z *ZooKeeper) Output() string {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.stderr == nil {
		return ""
	}
	return z.stderr.String()
}
