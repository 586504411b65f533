package main

import (
	"bufio"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
)

// newCandidate returns a library candidate in the election name.
func newCandidate(t *testing.T, name string) election.Service {
	t.Helper()
	e, err := etcdio.NewElection(newClient(t), name, etcdio.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// observed parses the JSON lines 'disco observe --json' printed.
func observed(t *testing.T, out string) []leaderLine {
	t.Helper()
	var lines []leaderLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l leaderLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// observe prints the leader, each change when a leader resigns, and
// "no leader" when nobody is left.
func TestObservePrintsChanges(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	ctx := testCtx(t, 20*time.Second)
	a, b := newCandidate(t, name), newCandidate(t, name)
	if err := a.Campaign(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	ta, _ := a.Term()

	p := startDisco(t, "--json", "observe", name)
	p.stdout.await(t, `"value":"alpha"`, 10*time.Second)
	campaigned := make(chan error, 1)
	go func() { campaigned <- b.Campaign(ctx, "beta") }()
	awaitKeys(t, newClient(t), name, 2)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	p.stdout.await(t, `"value":"beta"`, 5*time.Second)
	if err := <-campaigned; err != nil {
		t.Fatal(err)
	}
	if err := b.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	p.stdout.await(t, `"leader":false`, 5*time.Second)
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
	lines := observed(t, p.stdout.String())
	if len(lines) != 3 || lines[0].Value != "alpha" || lines[1].Value != "beta" || lines[2].Leader {
		t.Fatalf("observed %+v, want alpha, beta, no leader", lines)
	}
	if lines[0].Token != int64(ta.FencingToken) || lines[1].Token <= lines[0].Token {
		t.Fatalf("tokens %d, %d: want alpha's %d, then higher", lines[0].Token, lines[1].Token, ta.FencingToken)
	}
}

// elect with CMD runs it with the term's token once leading, resigns after
// it exits, and exits with its status; the next candidate then leads.
func TestElectRunsCommandThenResigns(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	ctx := testCtx(t, 20*time.Second)
	p := startDisco(t, "elect", name, "v1", "--", "sh", "-c", holdScript)
	out := p.stdout.await(t, "scope="+name, 10*time.Second)
	other := newCandidate(t, name)
	leader, err := other.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader.Value != "v1" || int64(leader.FencingToken) != tokenIn(t, out) {
		t.Fatalf("leader %+v; CMD printed %q", leader, out)
	}
	campaigned := make(chan error, 1)
	go func() { campaigned <- other.Campaign(ctx, "v2") }()
	awaitKeys(t, newClient(t), name, 2)
	p.stdin.Close() // CMD exits with 5
	if code := p.wait(t, 5*time.Second); code != 5 {
		t.Fatalf("exit status %d, want CMD's 5; stderr:\n%s", code, p.stderr)
	}
	if err := <-campaigned; err != nil {
		t.Fatal(err)
	}
}

// elect without CMD prints the term it wins and resigns at SIGINT.
func TestElectWithoutCommandPrintsTerm(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	p := startDisco(t, "elect", name, "v1")
	out := p.stdout.await(t, "leading "+name, 10*time.Second)
	if !strings.Contains(out, "token ") || !strings.Contains(out, "key "+name+"/") {
		t.Fatalf("term line %q lacks token or key", out)
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
	}
	p.stdout.await(t, "resigned "+name, time.Second)
	awaitKeys(t, newClient(t), name, 0)
}

// elect without CMD campaigns again after its lease is revoked, and prints
// the new term with a higher token.
func TestElectWithoutCommandCampaignsAgainAfterLoss(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	p := startDisco(t, "--json", "elect", name, "v1")
	p.stdout.await(t, `"event":"leading"`, 10*time.Second)
	first := observedTerms(t, p.stdout.String())[0]
	lease, err := strconv.ParseInt(first.Lease, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		t.Fatal(err)
	}
	p.stdout.await(t, `"event":"lost"`, 5*time.Second)
	out := p.stdout.await(t, `"lease":"`, 5*time.Second)
	for {
		terms := observedTerms(t, out)
		if last := terms[len(terms)-1]; last.Event == "leading" && last.Lease != first.Lease {
			if last.Token <= first.Token {
				t.Fatalf("new term's token %d, not above %d", last.Token, first.Token)
			}
			break
		}
		out = p.stdout.await(t, out+"{", 5*time.Second) // the next line
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
	}
}

// elect without CMD tells a term's loss only of a term it had: a waiting
// candidate whose key is deleted prints no "lost" line (it never led) and
// campaigns again, saying so on stderr.
func TestElectWithoutCommandLostOnlyAfterLeading(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	leader := startDisco(t, "--json", "elect", name, "a")
	leader.stdout.await(t, `"event":"leading"`, 10*time.Second)
	waiter := startDisco(t, "--json", "elect", name, "b")
	keys := awaitKeys(t, cli, name, 2)
	if _, err := cli.Delete(testCtx(t, 5*time.Second), keys[1]); err != nil {
		t.Fatal(err)
	}
	waiter.stderr.await(t, "before it led", 10*time.Second)
	awaitKeys(t, cli, name, 2) // it campaigns again
	// The waiter exits before the leader resigns: it would lead otherwise.
	for _, p := range []*proc{waiter, leader} {
		p.signal(t, syscall.SIGINT)
		if code := p.wait(t, 5*time.Second); code != 0 {
			t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
		}
	}
	if terms := observedTerms(t, waiter.stdout.String()); len(terms) != 0 {
		t.Fatalf("the candidate that never led printed %+v", terms)
	}
}

// observedTerms parses the JSON lines 'disco elect --json' printed.
func observedTerms(t *testing.T, out string) []termEvent {
	t.Helper()
	var terms []termEvent
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e termEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		terms = append(terms, e)
	}
	return terms
}

// elect with CMD stops CMD and exits with status 3 when its lease is
// revoked while CMD runs.
func TestElectLostTerminatesCommand(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	p := startDisco(t, "elect", name, "v1", "--", "sh", "-c", `echo "token=$FENCING_TOKEN"; exec sleep 30`)
	p.stdout.await(t, "token=", 10*time.Second)
	resp, err := cli.Get(testCtx(t, 5*time.Second), name+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cli.Revoke(testCtx(t, 5*time.Second), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 5*time.Second); code != exitLost {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("disco took %v after the revoke to end CMD", took)
	}
	p.stderr.await(t, "leadership of "+name+" lost", time.Second)
}

// observe carries on when its own lease is revoked: it says so on stderr,
// observes again, and still prints the next change (and only once).
func TestObserveSurvivesItsLeaseLoss(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	cand := newCandidate(t, name)
	if err := cand.Campaign(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	before := leases(t, cli)
	// A short TTL: with no key to watch, observe learns of the loss from
	// its keepalive, sent every third of the TTL.
	p := startDisco(t, "--ttl", "2s", "observe", name)
	p.stdout.await(t, `value "alpha"`, 10*time.Second)
	var revoked int
	for id := range leases(t, cli) {
		if !before[id] {
			if _, err := cli.Revoke(ctx, id); err != nil {
				t.Fatal(err)
			}
			revoked++
		}
	}
	if revoked != 1 {
		t.Fatalf("revoked %d new leases, want observe's one", revoked)
	}
	p.stderr.await(t, "again in", 5*time.Second)
	if err := cand.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	out := p.stdout.await(t, "no leader", 5*time.Second)
	if n := strings.Count(out, "\n"); n != 2 {
		t.Fatalf("printed %d lines, want alpha then no leader:\n%s", n, out)
	}
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
	}
}

// leases returns the IDs of the leases etcd holds.
func leases(t *testing.T, cli *clientv3.Client) map[clientv3.LeaseID]bool {
	t.Helper()
	resp, err := cli.Leases(testCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[clientv3.LeaseID]bool{}
	for _, l := range resp.Leases {
		ids[l.ID] = true
	}
	return ids
}

// elect without CMD campaigns again after a loss for as long as the
// service stays out of reach: once it had a session, a reconnect that
// fails is said on stderr and tried again, and when etcd answers again it
// leads again. (Only a first connection that fails ends it.)
func TestElectWithoutCommandOutlastsOutage(t *testing.T) {
	noLeaks(t)
	name := nameOf(t)
	ep, px := proxied(t)
	p := startDisco(t, "--endpoints", ep, "--ttl", "2s", "--dial-timeout", "1s", "--command-timeout", "1s", "elect", name, "v1")
	p.stdout.await(t, "leading "+name, 10*time.Second)
	px.BlackholeTx()
	px.BlackholeRx()
	p.awaitRunning(t, p.stdout, "lost "+name, 10*time.Second)
	// etcd is still out of reach: the next session cannot be had.
	p.awaitRunning(t, p.stderr, "disco: campaigning in "+name+": ", 10*time.Second)
	px.UnblackholeTx()
	px.UnblackholeRx()
	p.awaitRunning(t, p.stdout, "\nleading "+name, 15*time.Second)
	p.signal(t, syscall.SIGINT)
	if code := p.wait(t, 5*time.Second); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, p.stderr)
	}
	p.stdout.await(t, "resigned "+name, time.Second)
}

// Ctrl-C (SIGINT), SIGTERM or SIGHUP while elect without CMD, observe or
// status is still connecting ends it normally, status 0, on every service.
func TestCampaignInterruptedWhileConnecting(t *testing.T) {
	noLeaks(t)
	for _, scheme := range []string{"", "zk://", "redis://"} {
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
			for _, args := range [][]string{{"elect", "/x", "v"}, {"observe", "/x"}, {"status", "/x"}} {
				t.Run(scheme+args[0]+"-"+sig.String(), func(t *testing.T) {
					addr, accepted := testkit.SilentEndpoint(t)
					p := startDisco(t, append([]string{"--endpoints", scheme + addr, "--dial-timeout", "30s"}, args...)...)
					select {
					case <-accepted: // disco is connecting, and minds signals
					case <-p.done:
						t.Fatalf("exit status %d before connecting; stderr:\n%s", p.code, p.stderr)
					case <-time.After(10 * time.Second):
						t.Fatal("disco did not connect")
					}
					p.signal(t, sig)
					if code := p.wait(t, 5*time.Second); code != 0 || p.stdout.String() != "" {
						t.Fatalf("exit status %d, stdout %q; want 0 and nothing; stderr:\n%s", code, p.stdout, p.stderr)
					}
				})
			}
		}
	}
}
