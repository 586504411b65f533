package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testserver"
)

// stores are the services disco runs on, each started for the test that
// needs it (etcd: the tests' server).
var stores = []struct {
	name  string
	start func(t *testing.T) string // returns --endpoints
}{
	{"etcd", func(t *testing.T) string { return endpoints[0] }},
	{"zookeeper", func(t *testing.T) string { return "zk://" + testserver.StartZooKeeper(t).Addr }},
	{"redis", func(t *testing.T) string { return "redis://" + testserver.StartRedis(t).Addr + "/0" }},
}

// On every store: disco lock runs CMD with a token while it holds (and -v
// does not say "waiting" when it need not wait); status shows the holder
// and the waiter with their values (--value, and HOST:PID by default); the
// waiter runs next with a higher token; elect runs CMD with the term's
// token and observe sees the leader.
func TestCommandOnEveryStore(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			name := "/jobs/report-" + st.name
			first := startDisco(t, "--endpoints", ep, "--ttl", "4s", "-v", "lock", "--value", "node-a:1", name, "--", "sh", "-c", holdScript)
			ours := tokenIn(t, first.stdout.await(t, "token=", 15*time.Second))
			if strings.Contains(first.stderr.String(), "waiting") {
				t.Errorf("the first holder, which did not wait, said it was waiting:\n%s", first.stderr)
			}
			second := startDisco(t, "--endpoints", ep, "--ttl", "4s", "-v", "lock", name, "--", "sh", "-c", `echo "token=$FENCING_TOKEN"`)
			second.stderr.await(t, "waiting", 15*time.Second)
			secondValue := fmt.Sprintf("%q", host+":"+strconv.Itoa(second.cmd.Process.Pid))
			var status string
			for deadline := time.Now().Add(10 * time.Second); ; {
				code, out, errOut := runDisco(t, 10*time.Second, "--endpoints", ep, "status", name)
				if code != 0 {
					t.Fatalf("status: exit %d: %s", code, errOut)
				}
				if strings.Contains(out, "holder") && strings.Contains(out, "waiter") {
					status = out
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("status never showed a holder and a waiter:\n%s", out)
				}
				time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
			}
			t.Logf("status:\n%s", status)
			owners := `(?m)^` + name + `: lock \(kind from layout\), 2 keys.*\n.*VALUE.*\n1 +holder +"node-a:1" .*\n2 +waiter +` + regexp.QuoteMeta(secondValue) + ` `
			if !regexp.MustCompile(owners).MatchString(status) {
				t.Errorf("status does not name the holder node-a:1 and the waiter %s:\n%s", secondValue, status)
			}
			first.stdin.Close()
			if code := first.wait(t, 10*time.Second); code != 5 {
				t.Fatalf("first: exit %d, want CMD's 5; stderr:\n%s", code, first.stderr)
			}
			if code := second.wait(t, 10*time.Second); code != 0 {
				t.Fatalf("second: exit %d; stderr:\n%s", code, second.stderr)
			}
			if theirs := tokenIn(t, second.stdout.String()); theirs <= ours {
				t.Fatalf("second holder's token %d, not above the first's %d", theirs, ours)
			}

			obs := startDisco(t, "--endpoints", ep, "observe", "/svc/leader-"+st.name)
			obs.stdout.await(t, "no leader", 15*time.Second)
			code, out, errOut := runDisco(t, 15*time.Second, "--endpoints", ep, "elect", "/svc/leader-"+st.name, "node-1", "--", "sh", "-c", `echo "token=$FENCING_TOKEN"`)
			if code != 0 {
				t.Fatalf("elect: exit %d: %s", code, errOut)
			}
			tokenIn(t, out)
			obs.stdout.await(t, `value "node-1"`, 10*time.Second)
		})
	}
}

// A scheme disco does not know, or two schemes together, is bad usage.
func TestEndpointSchemes(t *testing.T) {
	for _, c := range []struct {
		eps, want string
	}{
		{"consul://127.0.0.1:8500", "unknown scheme"},
		{"zk://127.0.0.1:2181,redis://127.0.0.1:6379", "together"},
		{"redis://a:1,b:2", "one primary"},
		// A path after host:port (a ZooKeeper chroot, a trailing slash)
		// is refused, not dialled until --dial-timeout as a silent host.
		{"zk://127.0.0.1:2181/app", `"/app" after host:port`},
		{"etcd://127.0.0.1:2379/", `"/" after host:port`},
		{"127.0.0.1:2379/v3", `"/v3" after host:port`},
	} {
		code, _, errOut := runDisco(t, 10*time.Second, "--endpoints", c.eps, "status", "/x")
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("--endpoints %s: exit %d, stderr %q; want %d saying %q", c.eps, code, errOut, exitUsage, c.want)
		}
	}
}

// A store that does not answer, or a host that does not exist, ends disco
// within --dial-timeout with one line that names the endpoint and says
// which: nothing else is logged (not the store clients' own logs).
func TestUnreachableStores(t *testing.T) {
	noLeaks(t)
	dead := deadEndpoint(t)
	for _, c := range []struct{ ep, want string }{
		{dead, "etcd at " + dead + " did not answer within 700ms (--dial-timeout)"},
		{"zk://" + dead, "ZooKeeper at " + dead + " did not answer within 700ms (--dial-timeout)"},
		{"redis://" + dead, "Redis at " + dead + " did not answer within 700ms (--dial-timeout)"},
		{"disco-no-such-host.invalid:2379", `etcd at disco-no-such-host.invalid:2379: no such host "disco-no-such-host.invalid"`},
		{"zk://disco-no-such-host.invalid:2181", `ZooKeeper at disco-no-such-host.invalid:2181: no such host "disco-no-such-host.invalid"`},
		{"redis://disco-no-such-host.invalid:6379", `Redis at disco-no-such-host.invalid:6379: no such host "disco-no-such-host.invalid"`},
	} {
		for _, args := range [][]string{{"status", "/x"}, {"lock", "/x", "--", "true"}} {
			start := time.Now()
			code, stdout, stderr := runDisco(t, 10*time.Second, append([]string{"--endpoints", c.ep, "--dial-timeout", "700ms"}, args...)...)
			took := time.Since(start)
			if code != exitFailure || stdout != "" || !strings.HasPrefix(stderr, "disco: "+c.want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("%s %v: status %d, stdout %q, stderr %q; want %d and one line %q", c.ep, args, code, stdout, stderr, exitFailure, c.want)
			}
			// The dial timeout, one lookup after it (1 s at most) and start-up.
			if took > 4*time.Second {
				t.Errorf("%s %v: took %v", c.ep, args, took)
			}
		}
	}
}

// proxiedStore starts the store named (as in stores) and returns its
// --endpoints through a fault proxy.
func proxiedStore(t *testing.T, store string) (string, *faultproxy.Proxy) {
	t.Helper()
	var scheme, target, db string
	switch store {
	case "etcd":
		return proxied(t)
	case "zookeeper":
		scheme, target = "zk://", testserver.StartZooKeeper(t).Addr
	case "redis":
		scheme, target, db = "redis://", testserver.StartRedis(t).Addr, "/0"
	}
	px, err := faultproxy.Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return scheme + px.Addr() + db, px
}

// A store that answers the connection but then answers status's reads too
// late ends status within --command-timeout, on every store, with one line
// that names the store, the bound and the flag.
func TestStatusSlowStoreOnEveryStore(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep, px := proxiedStore(t, st.name)
			px.DelayRx(2 * time.Second) // each answer: within --dial-timeout, past --command-timeout
			start := time.Now()
			code, stdout, stderr := runDisco(t, 60*time.Second, "--endpoints", ep, "--dial-timeout", "40s", "--command-timeout", "500ms", "status", nameOf(t))
			took := time.Since(start)
			want := "did not answer within 500ms (--command-timeout)"
			if code != exitFailure || stdout != "" || !strings.Contains(stderr, want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("status: exit %d, stdout %q, stderr %q; want %d and one line saying %q", code, stdout, stderr, exitFailure, want)
			}
			t.Logf("took %v: %s", took, stderr)
		})
	}
}

// A store that answers the connection but then answers the construction
// of a lock or an election (its lease or session) too late ends lock, elect
// and observe within --command-timeout, on every store whose constructors
// send a request (ZooKeeper's share the session, which sent it while
// connecting), with one line that names the store, the bound and the flag
// that set it: not a bare "context deadline exceeded".
func TestConstructorSlowStoreOnEveryStore(t *testing.T) {
	for _, store := range []string{"etcd", "redis"} {
		for _, c := range []struct {
			test string
			args []string // the command, then its arguments after NAME
		}{
			{"lock", []string{"lock", "--", "true"}},
			{"elect-CMD", []string{"elect", "v", "--", "true"}},
			{"elect", []string{"elect", "v"}},
			{"observe", []string{"observe"}},
		} {
			t.Run(store+"/"+c.test, func(t *testing.T) {
				ep, px := proxiedStore(t, store)
				px.DelayRx(2 * time.Second) // each answer: within --dial-timeout, past --command-timeout
				cmd := append([]string{"--endpoints", ep, "--dial-timeout", "40s", "--command-timeout", "500ms", c.args[0], nameOf(t)}, c.args[1:]...)
				code, stdout, stderr := runDisco(t, 60*time.Second, cmd...)
				// The backend times its own words from its own start, a
				// little after disco's: "within 499ms" may come.
				want := "context deadline exceeded (--command-timeout 500ms ran out)"
				if code != exitFailure || stdout != "" || !strings.Contains(stderr, " did not answer within ") || !strings.HasSuffix(stderr, want+"\n") ||
					strings.Count(stderr, "\n") != 1 {
					t.Errorf("exit %d, stdout %q, stderr %q; want %d and one line saying it did not answer, ending %q", code, stdout, stderr, exitFailure, want)
				}
			})
		}
	}
}

// A store cut off after CMD started does not keep disco from exiting once
// CMD has: the release, one of disco's own requests, gives up within
// --command-timeout, and so does closing the lock, whose last request the
// store does not answer either, on every store. disco exits 1 saying the
// release failed (CMD exited 0) as --command-timeout ran out, the hold left
// to expire with its TTL.
func TestCutStoreReleasedWithinBounds(t *testing.T) {
	for _, st := range stores {
		for _, hold := range [][]string{{"lock"}, {"elect", "v"}} {
			t.Run(st.name+"/"+hold[0], func(t *testing.T) { testCutStoreReleasedWithinBounds(t, st.name, hold) })
		}
	}
}

// testCutStoreReleasedWithinBounds runs TestCutStoreReleasedWithinBounds
// on store with hold: the command, then its arguments after NAME.
func testCutStoreReleasedWithinBounds(t *testing.T, store string, hold []string) {
	ep, px := proxiedStore(t, store)
	args := append([]string{"--endpoints", ep, "--ttl", "60s", "--command-timeout", "1s", hold[0], nameOf(t)}, hold[1:]...)
	p := startDisco(t, append(args, "--", "sh", "-c", "echo ready; read x; exit 0")...)
	p.awaitRunning(t, p.stdout, "ready", 30*time.Second)
	px.BlackholeTx()
	px.BlackholeRx()
	start := time.Now()
	p.stdin.Close() // CMD exits 0; the release finds the store cut off
	code := p.wait(t, 90*time.Second)
	took := time.Since(start)
	ranOut := "context deadline exceeded (--command-timeout 1s ran out)"
	if code != exitFailure || !strings.Contains(p.stderr.String(), "release") || !strings.Contains(p.stderr.String(), ranOut) {
		t.Errorf("exit status %d, stderr %q; want %d saying the release failed, %q", code, p.stderr, exitFailure, ranOut)
	}
	// 1s for the release, 1s (2s at most) for the close, and time to spare
	// on a loaded machine; not the 10s lock.Do and election.Lead allow.
	if took > 8*time.Second {
		t.Errorf("disco exited %v after CMD, want within --command-timeout (1s) for the release and the close; stderr %q", took, p.stderr)
	}
}

// elect without CMD does not say "resigned" when its resignation at Ctrl-C
// failed (the store cut off): it says on stderr that it did not resign as
// --command-timeout ran out, so the term lasts until its lease expires, and
// exits 1, on every store.
func TestCampaignResignFailedIsNoResignation(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep, px := proxiedStore(t, st.name)
			name := nameOf(t)
			p := startDisco(t, "--endpoints", ep, "--ttl", "60s", "--command-timeout", "1s", "elect", name, "v")
			p.awaitRunning(t, p.stdout, "leading "+name, 30*time.Second)
			px.BlackholeTx()
			px.BlackholeRx()
			p.signal(t, syscall.SIGINT)
			code := p.wait(t, 60*time.Second)
			ranOut := "context deadline exceeded (--command-timeout 1s ran out)"
			if code != exitFailure || strings.Contains(p.stdout.String(), "resigned") || !strings.Contains(p.stderr.String(), "did not resign") ||
				!strings.Contains(p.stderr.String(), ranOut) {
				t.Errorf("exit status %d, stdout %q, stderr %q; want %d, no \"resigned\", and \"did not resign\" on stderr, %q", code, p.stdout, p.stderr, exitFailure, ranOut)
			}
		})
	}
}

// On every store, SIGHUP (the terminal or ssh session closed) is SIGTERM's
// like: a waiter stops waiting (status 129) and CMD never runs; a holder
// passes it on to CMD's group and releases once CMD exited, so the next
// waiter runs at once, well within the TTL, and disco exits with CMD's status.
func TestHangupOnEveryStore(t *testing.T) {
	const ttl = 30 * time.Second
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			name := nameOf(t) + "-hup"
			base := []string{"--endpoints", ep, "--ttl", ttl.String(), "-v", "lock", name, "--", "sh", "-c"}
			holder := startDisco(t, append(base, `trap 'echo got HUP; exit 7' HUP; echo ready; while :; do sleep 0.05; done`)...)
			holder.stdout.await(t, "ready", 15*time.Second)
			waiter := startDisco(t, append(base, "echo ran")...)
			waiter.stderr.await(t, "waiting", 15*time.Second)
			quitter := startDisco(t, append(base, "echo ran")...)
			quitter.stderr.await(t, "waiting", 15*time.Second)

			quitter.signal(t, syscall.SIGHUP)
			if code := quitter.wait(t, 5*time.Second); code != 128+int(syscall.SIGHUP) || quitter.stdout.String() != "" {
				t.Errorf("waiter after SIGHUP: exit status %d, stdout %q; want %d and nothing; stderr:\n%s",
					code, quitter.stdout, 128+int(syscall.SIGHUP), quitter.stderr)
			}

			start := time.Now()
			holder.signal(t, syscall.SIGHUP)
			if code := holder.wait(t, 5*time.Second); code != 7 {
				t.Errorf("holder after SIGHUP: exit status %d, want CMD's 7; stderr:\n%s", code, holder.stderr)
			}
			waiter.stdout.await(t, "ran", 5*time.Second)
			holder.stdout.await(t, "got HUP", time.Second)
			if took := time.Since(start); took > ttl/3 {
				t.Fatalf("the next waiter ran %v after SIGHUP to the holder", took)
			}
			if code := waiter.wait(t, 5*time.Second); code != 0 {
				t.Fatalf("waiter: exit status %d; stderr:\n%s", code, waiter.stderr)
			}
		})
	}
}

// A NAME a store refuses (its library's primitives.ErrInvalidArgument) is
// bad usage, status 2 with the help to read, on every store and for every
// command that takes a NAME, elect without CMD too.
func TestRefusedNamesAreUsageOnEveryStore(t *testing.T) {
	long := "/" + strings.Repeat("x", 1100)
	refused := map[string][]string{
		"etcd":      {long},
		"zookeeper": {long, "/a//b", "/zookeeper/x", "/a/.."},
		"redis":     {long},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			for _, name := range refused[st.name] {
				for _, args := range [][]string{
					{"lock", name, "--", "true"},
					{"elect", name, "v", "--", "true"},
					{"elect", name, "v"},
					{"observe", name},
					{"status", name},
				} {
					code, stdout, stderr := runDisco(t, 20*time.Second, append([]string{"--endpoints", ep}, args...)...)
					lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
					help := "Run 'disco " + args[0] + " --help' for usage."
					if code != exitUsage || stdout != "" || len(lines) != 2 || !strings.HasPrefix(lines[0], "disco: ") ||
						!strings.Contains(lines[0], "invalid argument") || lines[1] != help {
						t.Errorf("%.40q %v: exit status %d, stdout %q, stderr %.300q; want %d, a line saying invalid argument and %q",
							name, slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == name }), code, stdout, stderr, exitUsage, help)
					}
				}
			}
		})
	}
}

// status --json of a NAME without keys says the same on every store: an
// empty queue ([], not null), the kind told by the (empty) layout.
func TestStatusJSONWithoutKeysOnEveryStore(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			name := nameOf(t) + "-empty"
			code, out, errOut := runDisco(t, 15*time.Second, "--endpoints", ep, "--json", "status", name)
			if code != 0 {
				t.Fatalf("exit status %d: %s", code, errOut)
			}
			var r map[string]any
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("%q: %v", out, err)
			}
			if q, ok := r["queue"].([]any); !ok || len(q) != 0 || r["kind_from"] != "layout" || r["kind"] != "" {
				t.Errorf("printed %s; want \"queue\":[], \"kind\":\"\" and \"kind_from\":\"layout\"", out)
			}
			// With --kind, the kind is the flag's.
			_, out, _ = runDisco(t, 15*time.Second, "--endpoints", ep, "--json", "status", "--kind", "election", name)
			if !strings.Contains(out, `"kind":"election","kind_from":"flag"`) || !strings.Contains(out, `"queue":[]`) {
				t.Errorf("--kind election: printed %s", out)
			}
		})
	}
}

// A --ttl over what the ZooKeeper client can ask for (a session timeout in
// int32 milliseconds, just under 596h32m) is bad usage, said as such, not
// a ZooKeeper that did not answer; one within it works.
func TestZooKeeperTTLOverClientLimit(t *testing.T) {
	ep := "zk://" + testserver.StartZooKeeper(t).Addr
	name := nameOf(t)
	for _, args := range [][]string{{"lock", name, "--", "true"}, {"elect", name, "v"}, {"observe", name}, {"status", name}} {
		code, stdout, stderr := runDisco(t, 15*time.Second, append([]string{"--endpoints", ep, "--ttl", "597h", "--dial-timeout", "2s"}, args...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "597h0m0s") || !strings.Contains(stderr, "invalid argument") {
			t.Errorf("--ttl 597h %s: exit status %d, stdout %q, stderr %q; want %d naming the TTL as invalid", args[0], code, stdout, stderr, exitUsage)
		}
	}
	code, stdout, stderr := runDisco(t, 15*time.Second, "--endpoints", ep, "--ttl", "596h", "lock", name, "--", "echo", "ran")
	if code != 0 || stdout != "ran\n" {
		t.Errorf("--ttl 596h: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// ZooKeeper grants a session timeout within its own bounds (the test
// server's: 2 to 20 ticks, 1s to 10s), whatever --ttl asks for: a --ttl it
// does not grant is said on stderr in one line naming both, by every
// command that holds a session (not status); one it grants is not.
func TestZooKeeperTTLNegotiated(t *testing.T) {
	ep := "zk://" + testserver.StartZooKeeper(t).Addr
	most := 20 * testserver.ZooKeeperTickTime
	testTTLWarned(t, []string{"--endpoints", ep}, []time.Duration{3 * most, most / 2}, func(ttl time.Duration) string {
		if ttl <= most {
			return ""
		}
		return fmt.Sprintf("disco: warning: ZooKeeper granted a session timeout of %v, not the --ttl %v asked for", most, ttl)
	})
}

// etcd raises a lease's TTL to its minimum (one and a half election
// timeouts, in whole seconds: 2s for the test server's, etcd's default
// 1s): a --ttl it raises is said on stderr in one line naming both, by
// every command that holds a lease (not status), as ZooKeeper's
// negotiated timeout is; one it grants is not.
func TestEtcdTTLRaised(t *testing.T) {
	cli := newClient(t)
	ctx := testCtx(t, 10*time.Second)
	l, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	least := time.Duration(l.TTL) * time.Second
	if least < 2*time.Second {
		t.Skipf("this etcd grants a TTL of %v, raising none (its election timeout is below 1s)", least)
	}
	testTTLWarned(t, nil, []time.Duration{least / 2, least}, func(ttl time.Duration) string {
		if ttl >= least {
			return ""
		}
		return fmt.Sprintf("disco: warning: etcd granted a lease TTL of %v, not the --ttl %v asked for", least, ttl)
	})
}

// testTTLWarned runs lock, elect and observe on the service that store
// (flags before the command) names, with each of ttls as --ttl, and checks
// that each prints its output, exits 0 and says on stderr warning(ttl), in
// one line, or nothing when that is ""; status says nothing whatever
// --ttl.
func testTTLWarned(t *testing.T, store []string, ttls []time.Duration, warning func(ttl time.Duration) string) {
	name := nameOf(t)
	for _, c := range []struct {
		args  []string
		out   string // what it prints
		until bool   // whether it runs until SIGINT
	}{
		{[]string{"lock", name, "--", "echo", "ran"}, "ran\n", false},
		{[]string{"elect", name, "v", "--", "echo", "ran"}, "ran\n", false},
		{[]string{"observe", name}, "no leader of " + name + "\n", true},
		{[]string{"elect", name, "v"}, "leading " + name, true},
	} {
		for _, ttl := range ttls {
			p := startDisco(t, append(append(slices.Clone(store), "--ttl", ttl.String()), c.args...)...)
			p.stdin.Close()
			if c.until {
				p.awaitRunning(t, p.stdout, c.out, 20*time.Second)
				p.signal(t, syscall.SIGINT)
			}
			code := p.wait(t, 20*time.Second)
			want := warning(ttl)
			stdout, stderr := p.stdout.String(), p.stderr.String()
			if code != 0 || !strings.Contains(stdout, c.out) || (want == "" && stderr != "") ||
				(want != "" && (!strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1)) {
				t.Errorf("--ttl %v %s: exit status %d, stdout %q, stderr %q; want 0, %q and stderr %q", ttl, c.args[0], code, stdout, stderr, c.out, want)
			}
		}
	}
	for _, ttl := range ttls {
		code, _, stderr := runDisco(t, 20*time.Second, append(append(slices.Clone(store), "--ttl", ttl.String()), "status", name)...)
		if code != 0 || stderr != "" {
			t.Errorf("status with --ttl %v: exit status %d, stderr %q; want 0 and nothing (status holds nothing)", ttl, code, stderr)
		}
	}
}

// A --ttl over the longest lease etcd grants (9e9 seconds, 2500000h) is
// bad usage, said as such before disco connects, as ZooKeeper's limit is;
// the longest works.
func TestEtcdTTLOverServerLimit(t *testing.T) {
	name := nameOf(t)
	for _, args := range [][]string{{"lock", name, "--", "true"}, {"elect", name, "v"}, {"observe", name}} {
		code, stdout, stderr := runDisco(t, 15*time.Second, append([]string{"--ttl", "2500001h"}, args...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "2500001h0m0s") || !strings.Contains(stderr, "invalid argument") {
			t.Errorf("--ttl 2500001h %s: exit status %d, stdout %q, stderr %q; want %d naming the TTL as invalid", args[0], code, stdout, stderr, exitUsage)
		}
	}
	code, stdout, stderr := runDisco(t, 15*time.Second, "--ttl", "2500000h", "lock", name, "--", "echo", "ran")
	if code != 0 || stdout != "ran\n" {
		t.Errorf("--ttl 2500000h: exit status %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// Under nohup (SIGHUP ignored when disco starts), a closed terminal's
// SIGHUP neither ends disco nor reaches CMD: disco stays deaf to it, as
// nohup asks; SIGTERM still ends it.
func TestHangupIgnoredUnderNohup(t *testing.T) {
	p := startProc(t, "sh", "-c", `trap "" HUP; exec "$0" "$@"`, discoBin, "lock", nameOf(t), "--",
		"sh", "-c", `trap 'echo got HUP; exit 7' HUP; trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	p.stdout.await(t, "ready", 15*time.Second)
	p.signal(t, syscall.SIGHUP)
	select {
	case <-p.done:
		t.Fatalf("disco under nohup ended at SIGHUP: exit status %d, stdout %q, stderr %q", p.code, p.stdout, p.stderr)
	case <-time.After(time.Second): // a negative check, not synchronisation
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 10*time.Second); code != 0 || strings.Contains(p.stdout.String(), "got HUP") {
		t.Fatalf("after SIGTERM: exit status %d, stdout %q; want 0, CMD never told of the SIGHUP", code, p.stdout)
	}
}

// --kind overrides the kind the layout tells, on every store: a lock's
// holder read as an election is its leader, with its value; it is never
// left out of the queue, as if nobody held.
func TestStatusKindFlagOnEveryStore(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			name := nameOf(t) + "-" + st.name
			holder := startDisco(t, "--endpoints", ep, "lock", "--value", "node-a", name, "--", "sh", "-c", holdScript)
			holder.stdout.await(t, "token=", 15*time.Second)
			code, out, errOut := runDisco(t, 15*time.Second, "--endpoints", ep, "status", "--kind", "election", name)
			want := `(?m)^` + regexp.QuoteMeta(name) + `: election \(kind from flag\), 1 key.*\n.*\n1 +leader +"node-a" `
			if code != 0 || !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("status --kind election of a held lock: exit %d, stderr %q, stdout:\n%s\nwant the holder as the leader (%s)", code, errOut, out, want)
			}
			holder.stdin.Close()
			if code := holder.wait(t, 10*time.Second); code != 5 {
				t.Fatalf("holder: exit %d, want CMD's 5; stderr:\n%s", code, holder.stderr)
			}
		})
	}
}

// A hold that CMD's supervisor never saw lost, but that its release (or
// resignation) finds gone after CMD exited 0, ends disco with status 3 and
// a line that says so: that it was found lost at the release, and CMD's
// status, not that it was "lost while CMD ran". On Redis a hold's key
// deleted by hand is noticed at the session's next refresh (a third of the
// TTL, 20s here) or by the release, whichever comes first.
func TestLostFoundAtRelease(t *testing.T) {
	r := testserver.StartRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { admin.Close() })
	ep := "redis://" + r.Addr + "/0"
	for _, c := range []struct {
		hold []string // the command, then its arguments after NAME
		want string
	}{
		{[]string{"lock"}, "lock %s was found lost at its release, once CMD had ended (CMD exited with status 0): "},
		{[]string{"elect", "v"}, "leadership of %s was found lost at its resignation, once CMD had ended (CMD exited with status 0): "},
	} {
		t.Run(c.hold[0], func(t *testing.T) {
			name := nameOf(t)
			args := append([]string{"--endpoints", ep, "--ttl", "60s", c.hold[0], name}, c.hold[1:]...)
			p := startDisco(t, append(args, "--", "sh", "-c", "echo ready; read x; exit 0")...)
			p.awaitRunning(t, p.stdout, "ready", 15*time.Second)
			code, out, errOut := runDisco(t, 15*time.Second, "--endpoints", ep, "--json", "status", name)
			var st struct {
				Queue []struct{ Key string } `json:"queue"`
			}
			if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Queue) != 1 {
				t.Fatalf("status: exit %d, %v, stdout %q, stderr %q", code, err, out, errOut)
			}
			if n, err := admin.Del(testCtx(t, 5*time.Second), st.Queue[0].Key).Result(); n != 1 || err != nil {
				t.Fatalf("deleting %s: %d, %v", st.Queue[0].Key, n, err)
			}
			p.stdin.Close() // CMD exits 0; the release finds the hold gone
			code = p.wait(t, 15*time.Second)
			want := fmt.Sprintf(c.want, name)
			if stderr := p.stderr.String(); code != exitLost || !strings.HasPrefix(stderr, "disco: "+want) || strings.Count(stderr, "\n") != 1 {
				t.Errorf("exit status %d, stderr %q; want %d and one line %q...", code, stderr, exitLost, want)
			}
		})
	}
}
