package etcdio

import (
	"context"
	"errors"
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

// gatedLease holds back the first holdBack calls of TimeToLive until gate
// is closed, and tells asked when the first comes: the session's lease
// check, unanswered.
type gatedLease struct {
	clientv3.Lease
	holdBack int32
	calls    atomic.Int32
	asked    chan struct{}
	gate     chan struct{}
}

func (l *gatedLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	n := l.calls.Add(1)
	if n == 1 {
		close(l.asked)
	}
	if n <= l.holdBack {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return l.Lease.TimeToLive(ctx, id, opts...)
}

// TestUnlockAfterTheHoldsKeyVanished: a holder's watch sees its key go, and
// its Unlock comes while the lease check that follows has not answered.
// Unlock asks about the lease itself: if the lease was revoked, the hold
// was lost with the session, and Unlock returns an error wrapping ErrLost,
// as it does on every other backend (before, it returned ErrNotHeld,
// blaming another client); if someone else deleted the key, ErrNotHeld;
// if Unlock's ctx ends before etcd answers, ctx's error, and the session's
// own check ends the hold. The hold ends Lost each time.
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
	cases := []struct {
		name     string
		fault    func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error
		holdBack int32 // lease checks held back until Unlock returns
		unlock   time.Duration
		want     func(error) bool
	}{
		{"lease revoked", revoke, 1, 10 * time.Second, func(err error) bool {
			return errors.Is(err, primitives.ErrLost) && !errors.Is(err, lock.ErrNotHeld)
		}},
		{"key deleted", deleteKey, 1, 10 * time.Second, func(err error) bool { return errors.Is(err, lock.ErrNotHeld) }},
		{"no answer", revoke, 2, 200 * time.Millisecond, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			unlockVanished(t, c.fault, c.holdBack, c.unlock, c.want)
		})
	}
}

func unlockVanished(t *testing.T, fault func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error,
	holdBack int32, unlock time.Duration, want func(error) bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	gl := &gatedLease{Lease: cli.Lease, holdBack: holdBack, asked: make(chan struct{}), gate: make(chan struct{})}
	cli.Lease = gl
	opened := false
	open := func() {
		if !opened {
			opened = true
			close(gl.gate)
		}
	}
	defer open()
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
	select {
	case <-gl.asked: // the hold's watch saw its key go
	case <-ctx.Done():
		t.Fatal("no lease check after the key went")
	}
	uctx, ucancel := context.WithTimeout(ctx, unlock)
	err = l.Unlock(uctx)
	ucancel()
	if !want(err) {
		t.Fatalf("Unlock after the key went: %v", err)
	}
	open()
	for ev := range events {
		switch ev := ev.(type) {
		case primitives.Lost:
			if !errors.Is(ev.Err, primitives.ErrLost) {
				t.Fatalf("Lost with %v", ev.Err)
			}
			return
		case primitives.Released:
			t.Fatal("hold ended Released after its key went")
		}
	}
	t.Fatal("no Lost event")
}
