package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
