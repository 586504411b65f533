package main

import (
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testserver"
)

// stores are the services disco runs on besides etcd, each started for
// the test that needs it.
var stores = []struct {
	name  string
	start func(t *testing.T) string // returns --endpoints
}{
	{"zookeeper", func(t *testing.T) string { return "zk://" + testserver.StartZooKeeper(t).Addr }},
	{"redis", func(t *testing.T) string { return "redis://" + testserver.StartRedis(t).Addr + "/0" }},
}

// On ZooKeeper and Redis as on etcd: disco lock runs CMD with a token while
// it holds, status shows the holder and the waiter, the waiter runs next
// with a higher token; elect runs CMD with the term's token and observe
// sees the leader.
func TestCommandOnEveryStore(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			ep := st.start(t)
			name := "/jobs/report"
			first := startDisco(t, "--endpoints", ep, "--ttl", "4s", "lock", name, "--", "sh", "-c", holdScript)
			ours := tokenIn(t, first.stdout.await(t, "token=", 15*time.Second))
			second := startDisco(t, "--endpoints", ep, "--ttl", "4s", "-v", "lock", name, "--", "sh", "-c", `echo "token=$FENCING_TOKEN"`)
			second.stderr.await(t, "waiting", 15*time.Second)
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

			obs := startDisco(t, "--endpoints", ep, "observe", "/svc/leader")
			obs.stdout.await(t, "no leader", 15*time.Second)
			code, out, errOut := runDisco(t, 15*time.Second, "--endpoints", ep, "elect", "/svc/leader", "node-1", "--", "sh", "-c", `echo "token=$FENCING_TOKEN"`)
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
