package main

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/faultproxy"
)

// proxied returns an endpoint of the test server through a fault proxy.
func proxied(t *testing.T) (string, *faultproxy.Proxy) {
	t.Helper()
	ep := endpoints[0]
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Listen("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return "http://" + px.Addr(), px
}

// When the lease of disco's lock goes unconfirmed (etcd cut off), CMD,
// which ignores SIGTERM, and its group are gone before the lease may
// expire, even with a --grace far longer than the TTL. If the lease is
// confirmed again, disco releases and exits with status 3 saying the hold
// was in doubt; if it expires, disco exits with status 3 saying it was lost.
func TestLockSuspendedStopsCommandBeforeDeadline(t *testing.T) {
	for _, heal := range []bool{true, false} {
		t.Run(map[bool]string{true: "confirmed again", false: "expired"}[heal], func(t *testing.T) {
			noLeaks(t)
			name := nameOf(t)
			ep, px := proxied(t)
			const ttl = 4 * time.Second
			const script = `trap "" TERM; echo "token=$FENCING_TOKEN pid=$$"; while :; do sleep 0.05; done`
			p := startDisco(t, "lock", "--endpoints", ep, "--ttl", ttl.String(), "--grace", "1m", name, "--", "sh", "-c", script)
			out := p.stdout.await(t, "pid=", 10*time.Second)
			pid, err := strconv.Atoi(regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(out)[1])
			if err != nil {
				t.Fatal(err)
			}
			cut := time.Now()
			px.BlackholeTx()
			px.BlackholeRx()
			// Every renewal acknowledged came before the cut: the lease may
			// expire no earlier than its last renewal plus the TTL, which is
			// before cut+ttl. CMD's group must be dead before then.
			for len(groupMembers(t, pid)) > 0 {
				if time.Since(cut) > ttl {
					t.Fatalf("CMD's group still runs %v after etcd was cut off (TTL %v); stderr:\n%s", time.Since(cut), ttl, p.stderr)
				}
				time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
			}
			gone := time.Since(cut)
			p.stderr.await(t, "in doubt", time.Second)
			if heal {
				px.UnblackholeTx()
				px.UnblackholeRx()
			}
			if code := p.wait(t, 3*ttl); code != exitLost {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
			}
			want := "lost"
			if heal {
				want = "confirmed again"
			}
			if !strings.Contains(p.stderr.String(), want) {
				t.Fatalf("stderr does not say %q:\n%s", want, p.stderr)
			}
			px.UnblackholeTx()
			px.UnblackholeRx()
			t.Logf("CMD's group gone %v after the cut (TTL %v); stderr:\n%s", gone.Round(time.Millisecond), ttl, p.stderr)
			if heal {
				awaitKeys(t, newClient(t), name, 0)
			}
		})
	}
}
