package etcdio

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// gatedLease holds back the first holdBack calls of TimeToLive, each until
// its gate is closed. Call n (from 1) closes arrived[n-1] when it comes and
// returned[n-1] once it has its answer. The first is the session's lease
// check.
type gatedLease struct {
	clientv3.Lease
	calls    atomic.Int32
	gates    []chan struct{}
	arrived  []chan struct{}
	returned []chan struct{}
}

func newGatedLease(l clientv3.Lease, holdBack int) *gatedLease {
	gl := &gatedLease{Lease: l}
	for range max(holdBack, 2) {
		gl.gates = append(gl.gates, make(chan struct{}))
		gl.arrived = append(gl.arrived, make(chan struct{}))
		gl.returned = append(gl.returned, make(chan struct{}))
	}
	for i := holdBack; i < len(gl.gates); i++ {
		close(gl.gates[i])
	}
	return gl
}

func (l *gatedLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	n := int(l.calls.Add(1))
	if n > len(l.gates) {
		return l.Lease.TimeToLive(ctx, id, opts...)
	}
	close(l.arrived[n-1])
	defer close(l.returned[n-1])
	select {
	case <-l.gates[n-1]:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.Lease.TimeToLive(ctx, id, opts...)
}

// open lets every call held back go.
func (l *gatedLease) open() {
	for _, g := range l.gates {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

// wait waits for ch or fails t.
func wait(ctx context.Context, t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
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
		return func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc) {
			wait(ctx, t, gl.arrived[1], "question from Unlock")
			if answered {
				close(gl.gates[0])
				wait(ctx, t, gl.returned[0], "answer to the session's check")
			}
			cancel()
		}
	}
	isLost := func(err error) bool { return errors.Is(err, primitives.ErrLost) && !errors.Is(err, lock.ErrNotHeld) }
	isNotHeld := func(err error) bool { return errors.Is(err, lock.ErrNotHeld) }
	isCanceled := func(err error) bool { return errors.Is(err, context.Canceled) }
	cases := []struct {
		name     string
		fault    func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error
		holdBack int // lease checks held back
		during   func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc)
		want     func(error) bool
		lostSays string // the hold's Lost, before the session's own deadline
	}{
		{"lease revoked", revoke, 1, nil, isLost, "was revoked"},
		{"key deleted", deleteKey, 1, nil, isNotHeld, "deleted by another client"},
		{"no answer", revoke, 2, giveUp(false), isCanceled, "was revoked"},
		{"no answer, the session's check answered", deleteKey, 2, giveUp(true), isCanceled, "deleted by another client"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			unlockVanished(t, c.fault, c.holdBack, c.during, c.want, c.lostSays)
		})
	}
}

func unlockVanished(t *testing.T, fault func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error,
	holdBack int, during func(ctx context.Context, t *testing.T, gl *gatedLease, cancel context.CancelFunc), want func(error) bool,
	lostSays string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	gl := newGatedLease(cli.Lease, holdBack)
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
	// The keepalive must not be the one that finds the lease gone.
	resume := make(chan struct{})
	defer close(resume)
	testhook.PauseRenewal(s, resume)
	if err := fault(ctx, admin, s, g.Key); err != nil {
		t.Fatal(err)
	}
	wait(ctx, t, gl.arrived[0], "lease check after the key went") // the hold's watch saw it go
	uctx, ucancel := context.WithCancel(ctx)
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
