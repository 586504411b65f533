package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives/election"
)

const interopTTL = 2 * time.Second

// goCandidate is a client-go leaderelection candidate on the Lease.
type goCandidate struct {
	id      string
	le      *leaderelection.LeaderElector
	cancel  context.CancelFunc
	started chan struct{}
	stopped chan struct{}
	done    chan struct{}
}

// startGo starts a client-go candidate that releases the Lease when
// stopped if release is set.
func startGo(t *testing.T, lease, id string, release bool) *goCandidate {
	t.Helper()
	cs, _ := client(t)
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: lease},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	c := &goCandidate{id: id, started: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: interopTTL, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
		ReleaseOnCancel: release, Name: id,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(c.started) },
			OnStoppedLeading: func() { close(c.stopped) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	c.le = le
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		le.Run(ctx)
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *goCandidate) stop() {
	c.cancel()
	<-c.done
}

func newDisco(t *testing.T, lease, id string) election.Service {
	t.Helper()
	cs, _ := client(t)
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithTTL(interopTTL), k8sio.WithIdentity(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// within waits for ch, failing t after d.
func within(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}

// renewalsSeen waits until the Lease's renewTime has moved on n times, so
// that its holder has been seen alive for that long.
func renewalsSeen(t *testing.T, lease string, n int) {
	t.Helper()
	var last time.Time
	for seen := 0; seen < n; {
		l, err := admin().CoordinationV1().Leases(namespace).Get(background(t), lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r := l.Spec.RenewTime; r != nil && r.After(last) {
			if !last.IsZero() {
				seen++
			}
			last = r.Time
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

// A disco leader first: client-go candidates agree it leads and wait; once
// it resigns one of them leads, and disco observers report that leader
// with no token. A later disco leader's token is above the first one's,
// and a guard then rejects the first.
func TestInteropDiscoLeaderThenClientGo(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	a, watcher := newDisco(t, lease, "disco-a"), newDisco(t, lease, "disco-watcher")
	if err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	la, _ := a.Term()
	gd := guard.New()
	if err := gd.Check(la.Token()); err != nil {
		t.Fatal(err)
	}
	g1, g2 := startGo(t, lease, "go-1", true), startGo(t, lease, "go-2", true)
	renewalsSeen(t, lease, 3) // more than a lease duration of renewals
	for _, g := range []*goCandidate{g1, g2} {
		select {
		case <-g.started:
			t.Fatalf("%s leads while disco's leader renews", g.id)
		default:
		}
		if got := g.le.GetLeader(); got != "disco-a" {
			t.Fatalf("%s sees leader %q, want disco-a", g.id, got)
		}
	}
	obs := watcher.Observe(ctx)
	if first := <-obs; first.Token() != la.Token() || first.Value != "a" {
		t.Fatalf("observer's first %+v, want %+v", first, la)
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var leader *goCandidate
	select {
	case <-g1.started:
		leader = g1
	case <-g2.started:
		leader = g2
	case <-time.After(10 * time.Second):
		t.Fatal("no client-go candidate leads after disco's leader resigned")
	}
	for l := range obs {
		if l.Value == leader.id {
			if l.Token() != 0 || l.Created != 0 || l.Key == "" {
				t.Fatalf("a client-go leader observed as %+v, want its identity and no token", l)
			}
			break
		}
	}
	ld, err := watcher.Leader(ctx)
	if err != nil || ld.Value != leader.id || ld.Token() != 0 {
		t.Fatalf("Leader = %+v, %v; want %s with no token", ld, err, leader.id)
	}
	// A client-go leader carries no token: a guard turns its requests away.
	h := gd.HTTPMiddleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/", nil))
	if rec.Code != http.StatusPreconditionRequired {
		t.Fatalf("a request without a token: %d, want 428", rec.Code)
	}
	// The client-go leader stops and releases; disco's next leader fences
	// disco's first.
	b := newDisco(t, lease, "disco-b")
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx, "b") }()
	leader.stop()
	other := g1
	if leader == g1 {
		other = g2
	}
	other.stop()
	if err := <-won; err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Term()
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after %d", lb.Token(), la.Token())
	}
	if err := gd.Check(lb.Token()); err != nil {
		t.Fatal(err)
	}
	if err := gd.Check(la.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the deposed disco leader's token: %v, want ErrTokenStale", err)
	}
	for _, s := range []election.Service{a, watcher, b} {
		s.Close()
	}
}

// A client-go leader first: disco candidates agree it leads and wait while
// it renews; when it releases, a disco candidate leads at once; when a
// client-go leader stops renewing without releasing, a disco candidate
// leads after its lease duration; tokens rise, and a guard rejects the
// disco leader each one deposed.
func TestInteropClientGoLeaderThenDisco(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	g := startGo(t, lease, "go-1", true)
	within(t, g.started, 10*time.Second, "client-go leads")
	b, c := newDisco(t, lease, "disco-b"), newDisco(t, lease, "disco-c")
	ld, err := b.Leader(ctx)
	if err != nil || ld.Value != "go-1" || ld.Token() != 0 {
		t.Fatalf("Leader = %+v, %v; want go-1 with no token", ld, err)
	}
	won := make(chan election.Service, 2)
	for _, e := range []election.Service{b, c} {
		go func() {
			if err := e.Campaign(ctx, "v"); err == nil {
				won <- e
			}
		}()
	}
	renewalsSeen(t, lease, 3)
	select {
	case e := <-won:
		l, _ := e.Term()
		t.Fatalf("a disco candidate leads (%+v) while client-go's leader renews", l)
	default:
	}
	released := time.Now()
	g.stop() // ReleaseOnCancel
	first := <-won
	if d := time.Since(released); d > interopTTL {
		t.Fatalf("disco led %v after client-go released, want at once", d)
	}
	l1, _ := first.Term()
	gd := guard.New()
	if err := gd.Check(l1.Token()); err != nil {
		t.Fatal(err)
	}
	// The disco leader resigns; a client-go leader takes over and then
	// stops renewing without releasing (a crash): the other disco
	// candidate leads once its lease duration has passed.
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	second := b
	if first == b {
		second = c
	}
	// second is still campaigning: stop it so that client-go can lead.
	_ = second.Close()
	g2 := startGo(t, lease, "go-2", false)
	within(t, g2.started, 10*time.Second, "the second client-go candidate leads")
	d := newDisco(t, lease, "disco-d")
	dwon := make(chan error, 1)
	go func() { dwon <- d.Campaign(ctx, "d") }()
	renewalsSeen(t, lease, 2)
	crashed := time.Now()
	g2.stop() // no release: the Lease keeps naming go-2 until it expires
	if err := <-dwon; err != nil {
		t.Fatal(err)
	}
	if since := time.Since(crashed); since < interopTTL-500*time.Millisecond {
		t.Fatalf("disco took a Lease client-go had renewed %v ago, before its lease duration %v", since, interopTTL)
	}
	l2, _ := d.Term()
	if err := gd.Check(l2.Token()); err != nil {
		t.Fatal(err)
	}
	if err := gd.Check(l1.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the deposed disco leader's token: %v, want ErrTokenStale", err)
	}
	for _, s := range []election.Service{b, c, d} {
		s.Close()
	}
}
