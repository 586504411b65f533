package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// peerEnsemble is a three-server ZooKeeper ensemble whose members reach
// each other's quorum port through fault proxies of their own, so that a
// test can hold back what the leader sends one follower: that follower
// then answers reads from a state behind the ensemble's, as a lagging
// follower does. (Dynamic reconfiguration is off, ZooKeeper's default, so
// each member keeps its own view of the others' addresses.)
type peerEnsemble struct {
	addrs [3]string               // client addresses
	links [3][3]*faultproxy.Proxy // [i][j]: member i's link to member j's quorum port; nil for i == j
}

func startPeerEnsemble(t *testing.T) *peerEnsemble {
	t.Helper()
	java, cp := testserver.LookPath("java"), testserver.ZooKeeperClasspath()
	if java == "" || cp == "" {
		testserver.Missing(t, "ZooKeeper (with a Java runtime)", testserver.ZooKeeperInstall)
	}
	ports, err := testserver.FreePorts(9)
	if err != nil {
		t.Fatal(err)
	}
	client, quorum, election := ports[0:3], ports[3:6], ports[6:9]
	e := &peerEnsemble{}
	for i := range 3 {
		e.addrs[i] = fmt.Sprintf("127.0.0.1:%d", client[i])
		for j := range 3 {
			if i == j {
				continue
			}
			p, err := faultproxy.Listen("127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", quorum[j]))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			e.links[i][j] = p
		}
	}
	root := t.TempDir()
	exited := make([]chan struct{}, 3)
	for i := range 3 {
		data := filepath.Join(root, fmt.Sprint("zk", i+1))
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintln(i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "tickTime=500\ninitLimit=10\nsyncLimit=20\nforceSync=no\ndataDir=%s\n", data)
		fmt.Fprintf(&cfg, "clientPort=%d\nclientPortAddress=127.0.0.1\nmaxClientCnxns=0\n", client[i])
		cfg.WriteString("admin.enableServer=false\n4lw.commands.whitelist=srvr\nreconfigEnabled=false\n")
		for j := range 3 {
			addr := fmt.Sprintf("127.0.0.1:%d", quorum[j])
			if j != i {
				addr = e.links[i][j].Addr()
			}
			fmt.Fprintf(&cfg, "server.%d=%s:%d\n", j+1, addr, election[j])
		}
		conf := filepath.Join(data, "zoo.cfg")
		if err := os.WriteFile(conf, []byte(cfg.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(java, "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Dzookeeper.jmx.log4j.disable=true", "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", conf)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited[i] = make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited[i]) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited[i] })
	}
	for i := range 3 {
		testkit.Eventually(t, 60*time.Second, "member "+e.addrs[i]+" serving", func() bool {
			out, err := testserver.FourLetter(e.addrs[i], "srvr")
			return err == nil && strings.Contains(out, "Mode: ")
		})
	}
	return e
}

// roles returns the leader's index and a follower's.
func (e *peerEnsemble) roles(t *testing.T) (leader, follower int) {
	t.Helper()
	leader, follower = -1, -1
	for i, a := range e.addrs {
		out, err := testserver.FourLetter(a, "srvr")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.Contains(out, "Mode: leader"):
			leader = i
		case strings.Contains(out, "Mode: follower"):
			follower = i
		}
	}
	if leader < 0 || follower < 0 {
		t.Fatalf("no leader and follower among %v", e.addrs)
	}
	return leader, follower
}

// TestVerifierOnLaggingFollower: a Verifier whose session is on a follower
// that lags the ensemble refuses a token the ensemble has superseded. The
// follower here gets nothing from the leader while the lock passes from
// one holder to the next; a read there still shows the first holder, so
// only a read synced with the leader first (Sync) can tell. Verify then
// waits for the follower to catch up: within its deadline it is not
// verified (the guard rejects the request as unverified), and once the
// follower hears the leader again the first holder's token is refused as
// forged.
func TestVerifierOnLaggingFollower(t *testing.T) {
	t.Parallel()
	e := startPeerEnsemble(t)
	leader, follower := e.roles(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const path = "/verify/lagging"
	onLeader := []string{e.addrs[leader]}
	a := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(onLeader, path, zkio.WithSessionTimeout(8*time.Second)))
	b := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(onLeader, path, zkio.WithSessionTimeout(8*time.Second)))
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession([]string{e.addrs[follower]}, zkio.WithSessionTimeout(8*time.Second)))
	v, err := zkio.NewVerifier(s, "lock", path)
	if err != nil {
		t.Fatal(err)
	}
	ga, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, "", ga.Token()); err != nil {
		t.Fatalf("the holder's token, the follower in step: %v", err)
	}
	// The follower hears nothing more from the leader, which goes on
	// with the other follower.
	lag := e.links[follower][leader]
	lag.PauseRx()
	defer lag.UnpauseRx()
	acquired := make(chan error, 1)
	var gb lock.Grant
	go func() {
		var err error
		gb, err = b.Lock(ctx)
		acquired <- err
	}()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	err = v.Verify(short, "", ga.Token())
	stop()
	if err == nil {
		t.Fatalf("the first holder's token %d, superseded by %d, verified on a lagging follower", ga.Token(), gb.Token())
	}
	if errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("Verify on a follower that cannot sync said forged, not unverified: %v", err)
	}
	lag.UnpauseRx()
	if err := v.Verify(ctx, "", ga.Token()); !errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("the first holder's token once the follower caught up: %v, want ErrTokenForged", err)
	}
	if err := v.Verify(ctx, "", gb.Token()); err != nil {
		t.Fatalf("the present holder's token: %v", err)
	}
}
