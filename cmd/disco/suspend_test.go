package main

import (
	"context"
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
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

// When the lease of disco's lock goes unconfirmed (etcd cut off by a fault
// proxy), CMD, which ignores SIGTERM as its whole group does, and its group
// are gone before the deadline disco announces (when the lease may expire),
// even with a --grace far longer than the TTL. If the lease is confirmed
// again (the cut healed at once), disco releases and exits with status 3,
// saying in one last line that the hold was in doubt; if it expires, disco
// exits with status 3 saying it was lost.
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
			px.BlackholeTx()
			px.BlackholeRx()
			doubt := p.stderr.await(t, "in doubt", 2*ttl)
			deadline := announced(t, doubt)
			if heal {
				px.UnblackholeTx()
				px.UnblackholeRx()
			}
			for len(groupMembers(t, pid)) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("CMD's group still runs after the deadline %s; stderr:\n%s", deadline.Format(clockTime), p.stderr)
				}
				time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
			}
			left := time.Until(deadline)
			if code := p.wait(t, 3*ttl); code != exitLost {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
			}
			lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
			last := lines[len(lines)-1]
			want := "lost while CMD ran"
			if heal {
				want = "was in doubt while CMD ran, so CMD was stopped; the lease was confirmed again and the hold released"
			}
			if !strings.HasPrefix(last, "disco: lock "+name+" ") || !strings.Contains(last, want) {
				t.Fatalf("last line %q does not say %q; stderr:\n%s", last, want, p.stderr)
			}
			px.UnblackholeTx()
			px.UnblackholeRx()
			t.Logf("CMD's group gone %v before the deadline (TTL %v); stderr:\n%s", left.Round(time.Millisecond), ttl, p.stderr)
			if heal {
				awaitKeys(t, newClient(t), name, 0)
			}
		})
	}
}

// announced returns the deadline disco printed ("may expire at
// 15:04:05.000"), today.
func announced(t *testing.T, stderr string) time.Time {
	t.Helper()
	m := regexp.MustCompile(`may expire at (\d\d:\d\d:\d\d\.\d{3})`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no deadline in %q", stderr)
	}
	at, err := time.ParseInLocation(clockTime, m[1], time.Local)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return time.Date(now.Year(), now.Month(), now.Day(), at.Hour(), at.Minute(), at.Second(), at.Nanosecond(), time.Local)
}

// suspendableSession returns a memio store and a session on it, closed
// when t ends.
func suspendableSession(t *testing.T) (*memio.Store, *memio.Session) {
	t.Helper()
	st := memio.NewStore()
	s, err := memio.NewSession(st, memio.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return st, s
}

// TestTryFirstKeepsWhatLockDoReads: the lock disco lock hands lock.Do is
// the backend's, less nothing lock.Do reads: a grant that arrives on a
// session suspended already starts fn with its context ended, as it does
// with the bare lock (the lock's SuspendedUntil, hidden by a wrapper,
// let CMD start live on a suspended session).
func TestTryFirstKeepsWhatLockDoReads(t *testing.T) {
	st, s := suspendableSession(t)
	l, err := memio.NewLock(st, "/a", memio.WithSession(s), memio.WithCancelOnSuspend())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s.Suspend()
	for _, c := range []struct {
		what string
		svc  lock.Service
	}{{"the lock itself", l}, {"the lock disco lock hands lock.Do", withWaitingLog(l, time.Second, func() {})}} {
		live := false
		err := lock.Do(context.Background(), c.svc, func(ctx context.Context, _ lock.Grant) error {
			live = ctx.Err() == nil
			return nil
		})
		if live || !errors.Is(err, primitives.ErrSuspended) {
			t.Errorf("lock.Do with %s on a suspended session: fn's context live %v, err %v; want ended, ErrSuspended", c.what, live, err)
		}
	}
}

// TestBoundedResignKeepsWhatLeadReads: the election disco elect hands
// election.Lead is the backend's, less nothing Lead reads: a term won on a
// session suspended already starts fn with its context ended, as it does
// with the bare election.
func TestBoundedResignKeepsWhatLeadReads(t *testing.T) {
	st, s := suspendableSession(t)
	e, err := memio.NewElection(st, "/a", memio.WithSession(s), memio.WithCancelOnSuspend())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	wrapped := withBoundedResign(e, time.Second)
	if _, ok := wrapped.(boundedResign); !ok {
		t.Fatalf("memio's election was not wrapped: %T", wrapped)
	}
	s.Suspend()
	for _, c := range []struct {
		what string
		svc  election.Service
	}{{"the election itself", e}, {"the election disco elect hands election.Lead", wrapped}} {
		live := false
		err := election.Lead(context.Background(), c.svc, "v", func(ctx context.Context, _ election.Leadership) error {
			live = ctx.Err() == nil
			return nil
		})
		if live || !errors.Is(err, primitives.ErrSuspended) {
			t.Errorf("election.Lead with %s on a suspended session: fn's context live %v, err %v; want ended, ErrSuspended", c.what, live, err)
		}
	}
}
