package etcdio

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// releaseAsks marks the context of a release (Unlock, Release) whose
// questions about the lease gatedLease tells from the session's own.
type releaseAsks struct{}

// gatedLease holds back questions about the lease (TimeToLive), each at
// its gate until the gate opens: a release's (asked under a context marked
// with releaseAsks) at release, every other (the session's lease check, a
// semaphore hold watch's) at session. A question held back ends with its
// context (a request's bound, the caller's end), as one etcd does not
// answer does; one let through asks etcd.
type gatedLease struct {
	clientv3.Lease
	session, release *leaseGate
}

// leaseGate is one gate of gatedLease. arrived closes as the first
// question comes, failed as the first held back ends with its context,
// answered as the first let through has etcd's answer.
type leaseGate struct {
	opened, arrived, failed, answered          chan struct{}
	openOnce, arriveOnce, failOnce, answerOnce sync.Once
}

func newLeaseGate(open bool) *leaseGate {
	g := &leaseGate{opened: make(chan struct{}), arrived: make(chan struct{}), failed: make(chan struct{}), answered: make(chan struct{})}
	if open {
		g.open()
	}
	return g
}

// open lets the questions held back at g, and every later one, go.
func (g *leaseGate) open() { g.openOnce.Do(func() { close(g.opened) }) }

// newGatedLease holds the session's questions back, and a release's if
// holdRelease.
func newGatedLease(l clientv3.Lease, holdRelease bool) *gatedLease {
	return &gatedLease{Lease: l, session: newLeaseGate(false), release: newLeaseGate(!holdRelease)}
}

func (l *gatedLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	g := l.session
	if ctx.Value(releaseAsks{}) != nil {
		g = l.release
	}
	g.arriveOnce.Do(func() { close(g.arrived) })
	select {
	case <-g.opened:
	case <-ctx.Done():
		g.failOnce.Do(func() { close(g.failed) })
		return nil, ctx.Err()
	}
	resp, err := l.Lease.TimeToLive(ctx, id, opts...)
	if err == nil || leaseEnded(resp, err) {
		g.answerOnce.Do(func() { close(g.answered) })
	}
	return resp, err
}

// open lets every question go.
func (l *gatedLease) open() {
	l.session.open()
	l.release.open()
}

// came waits for ch until ctx ends, and reports whether ch came first.
func came(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// stopKeepalive stops s's keepalive until resume closes, and returns once
// no keepalive is under way: the keepalive must not be the one that finds
// the lease gone. (One sent before the pause and answered after a revoke
// would end the session at once, with no lease check.) On the test's
// goroutine only.
func stopKeepalive(ctx context.Context, t *testing.T, s *Session, resume <-chan struct{}) {
	t.Helper()
	parked := testhook.PauseRenewal(s, resume)
	s.probeLease() // to its pause now, not after the renewal interval
	wait(ctx, t, parked, "keepalive stopped at its pause")
}

// wait waits for ch or fails t. On the test's goroutine only.
func wait(ctx context.Context, t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	if !came(ctx, ch) {
		t.Fatalf("no %s", what)
	}
}

// TestUnlockAfterTheHoldsKeyVanished: a holder's watch sees its key go, and
// its Unlock comes while the lease check that follows has not answered.
// Unlock asks about the lease itself: if the lease was revoked, the hold
// was lost with the session, and Unlock returns an error wrapping ErrLost,
// as it does on every other backend (before, it returned ErrNotHeld,
// blaming another client); if someone else deleted the key, ErrNotHeld;
// if Unlock's ctx ends before etcd answers, ctx's error, and the hold ends
// when the session's own check answers, also when that check answered
// while Unlock's question was under way. The hold ends Lost each time.
func TestUnlockAfterTheHoldsKeyVanished(t *testing.T) {
	testkit.NoLeaks(t)
	revoke := func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error {
		_, err := admin.Revoke(ctx, s.lease)
		return err
	}
	deleteKey := func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error {
		_, err := admin.Delete(ctx, key)
		return err
	}
	// giveUp ends Unlock's ctx once its question about the lease is
	// under way, after letting the session's check answer if answered.
	giveUp := func(answered bool) func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc) {
		// It runs on a goroutine of its own: it reports, never stops t.
		return func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc) {
			defer cancel()
			if !came(ctx, gl.release.arrived) {
				t.Error("no question from Unlock")
				return
			}
			if answered {
				gl.session.open()
				if !came(ctx, gl.session.answered) {
					t.Error("no answer to the session's check")
				}
			}
		}
	}
	isLost := func(err error) bool { return errors.Is(err, primitives.ErrLost) && !errors.Is(err, lock.ErrNotHeld) }
	isNotHeld := func(err error) bool { return errors.Is(err, lock.ErrNotHeld) }
	isCanceled := func(err error) bool { return errors.Is(err, context.Canceled) }
	cases := []struct {
		name        string
		fault       func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error
		holdRelease bool // Unlock's question is held back too
		during      func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc)
		want        func(error) bool
		lostSays    string // the hold's Lost, before the session's own deadline
	}{
		{"lease revoked", revoke, false, nil, isLost, "was revoked"},
		{"key deleted", deleteKey, false, nil, isNotHeld, "deleted by another client"},
		{"no answer", revoke, true, giveUp(false), isCanceled, "was revoked"},
		{"no answer, the session's check answered", deleteKey, true, giveUp(true), isCanceled, "deleted by another client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			unlockVanished(t, c.fault, c.holdRelease, c.during, c.want, c.lostSays)
		})
	}
}

func unlockVanished(t *testing.T, fault func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error,
	holdRelease bool, during func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc), want func(error) bool,
	lostSays string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	gl := newGatedLease(cli.Lease, holdRelease)
	cli.Lease = gl
	defer gl.open()
	s, err := NewSession(cli, WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := NewLock(cli, "/test/unlock-vanished/"+t.Name(), WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	defer close(resume)
	stopKeepalive(ctx, t, s, resume)
	if err := fault(ctx, admin, s, g.Key); err != nil {
		t.Fatal(err)
	}
	wait(ctx, t, gl.session.arrived, "lease check after the key went") // the hold's watch saw it go
	uctx, ucancel := context.WithCancel(context.WithValue(ctx, releaseAsks{}, true))
	defer ucancel()
	if during != nil {
		go during(ctx, t, gl, ucancel)
	}
	err = l.Unlock(uctx)
	if !want(err) {
		t.Fatalf("Unlock after the key went: %v", err)
	}
	gl.open()
	for ev := range events {
		switch ev := ev.(type) {
		case primitives.Lost:
			if !errors.Is(ev.Err, primitives.ErrLost) || !strings.Contains(ev.Err.Error(), lostSays) {
				t.Fatalf("Lost with %v, want ErrLost saying %q", ev.Err, lostSays)
			}
			return
		case primitives.Released:
			t.Fatal("hold ended Released after its key went")
		}
	}
	t.Fatal("no Lost event")
}
