package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	ports, err := testserver.ReservePorts(9)
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
		// maxSessionTimeout: sessions may outlast what a follower can
		// lag (syncLimit ticks) with room (see TestVerifierOnLaggingFollower).
		fmt.Fprintf(&cfg, "tickTime=500\ninitLimit=10\nsyncLimit=20\nmaxSessionTimeout=60000\nforceSync=no\ndataDir=%s\n", data)
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

// member is what a member's srvr says of it: its mode (leader, follower;
// "" while it does not serve) and the epoch of its last zxid (the high
// half: every leader an election establishes starts a new one).
type member struct {
	mode  string
	epoch uint64
}

// member asks member i what it is; the zero member if it does not answer.
func (e *peerEnsemble) member(i int) member {
	out, err := testserver.FourLetter(e.addrs[i], "srvr")
	if err != nil {
		return member{}
	}
	var m member
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			m.mode = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Zxid: 0x"); ok {
			if z, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil {
				m.epoch = z >> 32
			}
		}
	}
	return m
}

// settled waits until the ensemble has settled under one leader: one
// member leads and the two others follow, none at a later epoch than the
// leader's (a follower's zxid is that of the last write it applied: of an
// earlier epoch until the leader's first write). It returns the leader's
// index, a follower's and the leader's epoch. On a loaded machine the
// members' first election may take several rounds: roles read once may
// move after (see moved).
func (e *peerEnsemble) settled(t *testing.T) (leader, follower int, epoch uint64) {
	t.Helper()
	testkit.Eventually(t, 90*time.Second, "the ensemble settled under one leader", func() bool {
		leader, follower = -1, -1
		var ms [3]member
		for i := range ms {
			ms[i] = e.member(i)
			switch ms[i].mode {
			case "leader":
				if leader >= 0 {
					return false
				}
				leader = i
			case "follower":
				follower = i
			default:
				return false
			}
		}
		if leader < 0 {
			return false
		}
		epoch = ms[leader].epoch
		for _, m := range ms {
			if m.epoch > epoch {
				return false
			}
		}
		return true
	})
	return leader, follower, epoch
}

// follows reports whether member i follows at epoch: it has applied a
// write of that epoch's leader.
func (e *peerEnsemble) follows(i int, epoch uint64) bool {
	m := e.member(i)
	return m.mode == "follower" && m.epoch == epoch
}

// leads reports whether member i still leads, at epoch: no election has
// established another leader (nor i again) since epoch began.
func (e *peerEnsemble) leads(i int, epoch uint64) bool {
	m := e.member(i)
	return m.mode == "leader" && m.epoch == epoch
}

// errMoved says the ensemble elected a leader anew during a scenario: its
// premise (who leads, who lags) no longer held, and what it saw says
// nothing.
var errMoved = errors.New("the ensemble elected a leader anew during the scenario")

// TestVerifierOnLaggingFollower: a Verifier whose session is on a follower
// that lags the ensemble refuses a token the ensemble has superseded. The
// follower here gets nothing from the leader while the lock passes from
// one holder to the next; a read there still shows the first holder, so
// only a read synced with the leader first (Sync) can tell. Verify then
// waits for the follower to catch up: within its deadline it is not
// verified (the guard rejects the request as unverified), and once the
// follower hears the leader again the first holder's token is refused as
// forged, and the present holder's verified.
//
// On a loaded machine (three JVMs on two cores) the ensemble may elect
// anew: the scenario runs once the ensemble has settled, checks that the
// same leader leads at the same epoch once the lagging window is over,
// and runs again, on a new path, if it does not (what it saw then says
// nothing). The sessions outlast the lagging window with room: the
// leader expires a session on the follower it has not heard of for the
// session's timeout, and the follower reports nothing while it hears
// nothing; and the follower's own sessions ping through it, stuck behind
// the Verify's sync.
func TestVerifierOnLaggingFollower(t *testing.T) {
	t.Parallel()
	e := startPeerEnsemble(t)
	for attempt := 1; ; attempt++ {
		err := lagScenario(t, e, fmt.Sprintf("/verify/lagging-%d", attempt))
		if !errors.Is(err, errMoved) {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if attempt == 3 {
			t.Fatalf("attempt %d: %v; giving up", attempt, err)
		}
		t.Logf("attempt %d: %v; again", attempt, err)
	}
}

// lagScenario runs TestVerifierOnLaggingFollower's scenario on path once
// the ensemble has settled. Its error wraps errMoved if the leader did
// not lead throughout, at one epoch.
func lagScenario(t *testing.T, e *peerEnsemble, path string) error {
	leader, follower, epoch := e.settled(t)
	// A failure says nothing if the leader did not lead throughout.
	fail := func(err error) error { return errors.Join(err, e.moved(leader, epoch)) }
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	onLeader := []string{e.addrs[leader]}
	// Timeouts up to the ensemble's maxSessionTimeout (see
	// startPeerEnsemble), longer than the follower can lag (syncLimit).
	ttl := zkio.WithSessionTimeout(30 * time.Second)
	a, err := zkio.NewLock(onLeader, path, ttl)
	if err != nil {
		return fail(err)
	}
	defer a.Close()
	b, err := zkio.NewLock(onLeader, path, ttl)
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	s, err := zkio.NewSession([]string{e.addrs[follower]}, ttl)
	if err != nil {
		return fail(err)
	}
	defer s.Close()
	v, err := zkio.NewVerifier(s, "lock", path)
	if err != nil {
		return fail(err)
	}
	ga, err := a.Lock(ctx)
	if err != nil {
		return fail(err)
	}
	if err := v.Verify(ctx, "", ga.Token()); err != nil {
		return fail(fmt.Errorf("the holder's token, the follower in step: %w", err))
	}
	// Synced, the follower has applied the leader's writes of its epoch:
	// it follows that leader.
	if !e.follows(follower, epoch) {
		return fail(fmt.Errorf("%w: member %s does not follow at epoch %#x", errMoved, e.addrs[follower], epoch))
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
		return fail(err)
	}
	if err := <-acquired; err != nil {
		return fail(err)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	err = v.Verify(short, "", ga.Token())
	stop()
	// What the window saw holds only if the leader led throughout.
	if moved := e.moved(leader, epoch); moved != nil {
		return moved
	}
	if err == nil {
		return fmt.Errorf("the first holder's token %d, superseded by %d, verified on a lagging follower", ga.Token(), gb.Token())
	}
	if errors.Is(err, fencing.ErrTokenForged) {
		return fmt.Errorf("a Verify on a follower that cannot sync said forged, not unverified: %w", err)
	}
	lag.UnpauseRx()
	// The follower catches up; if it gave up on the leader meanwhile
	// (after syncLimit), it rejoins first, and a Verify may meet its
	// session reconnecting: unverified, not an answer. Never verified.
	if err := verifyUntil(ctx, v, ga.Token(), func(err error) bool { return errors.Is(err, fencing.ErrTokenForged) }); err != nil {
		return fail(fmt.Errorf("the first holder's token once the follower caught up: %w, want ErrTokenForged", err))
	}
	if err := verifyUntil(ctx, v, gb.Token(), func(err error) bool { return err == nil }); err != nil {
		return fail(fmt.Errorf("the present holder's token: %w", err))
	}
	return nil
}

// moved returns errMoved (wrapped) unless leader still leads at epoch.
func (e *peerEnsemble) moved(leader int, epoch uint64) error {
	if e.leads(leader, epoch) {
		return nil
	}
	return fmt.Errorf("%w: member %s no longer leads at epoch %#x", errMoved, e.addrs[leader], epoch)
}

// verifyUntil verifies tok until done says the answer is the one wanted,
// or ctx ends (its error then the last Verify's). An answer of the wrong
// kind (nil when done wants forged, forged when it wants nil) ends it at
// once: only an unverified answer (the ensemble did not answer) is asked
// again.
func verifyUntil(ctx context.Context, v *zkio.Verifier, tok fencing.Token, done func(error) bool) error {
	for {
		try, stop := context.WithTimeout(ctx, 5*time.Second)
		err := v.Verify(try, "", tok)
		stop()
		switch {
		case done(err):
			return nil
		case err == nil:
			return errors.New("verified")
		case errors.Is(err, fencing.ErrTokenForged):
			return err
		}
		// Paced: a Verify meeting a session that reconnects fails at once.
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
