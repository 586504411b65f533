package etcdio

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// TestSemaphoreReleaseAfterTheHoldsKeyVanished: a holder's watch of its
// session's own keys sees its queue key go, and its Release comes while the
// lease check that follows has not answered. Release asks about the lease
// itself, as a lock's Unlock does: if the lease was revoked, the hold was
// lost with the session, and Release returns an error wrapping ErrLost
// (before, it returned ErrNotHeld at once, blaming another client); if
// someone else deleted the key, ErrNotHeld; if Release's ctx ends before
// etcd answers, ctx's error, and the hold ends when the session's own check
// answers, also when that check answered while Release's question was under
// way. The hold ends Lost each time, and neither of its keys is left in
// etcd.
func TestSemaphoreReleaseAfterTheHoldsKeyVanished(t *testing.T) {
	testkit.NoLeaks(t)
	revoke := func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error {
		_, err := admin.Revoke(ctx, s.lease)
		return err
	}
	deleteKey := func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error {
		_, err := admin.Delete(ctx, key)
		return err
	}
	// giveUp ends Release's ctx once its question about the lease is
	// under way, after letting the session's check answer if answered.
	giveUp := func(answered bool) func(ctx context.Context, s *Session, gl *gatedLease, cancel context.CancelFunc) {
		return func(ctx context.Context, s *Session, gl *gatedLease, cancel context.CancelFunc) {
			select {
			case <-gl.release.arrived:
			case <-ctx.Done():
				return // Release returned without asking: the test says so
			}
			if answered {
				gl.session.open()
				for { // until the session's check answered (the test's ctx bounds it)
					checking, err := call(ctx, s, func(r actor.Reply[bool]) { r.Answer(s.checking, nil) })
					if err != nil || !checking {
						break
					}
					time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
				}
			}
			cancel()
		}
	}
	isLost := func(err error) bool {
		return errors.Is(err, primitives.ErrLost) && !errors.Is(err, semaphore.ErrNotHeld)
	}
	isNotHeld := func(err error) bool { return errors.Is(err, semaphore.ErrNotHeld) }
	isCanceled := func(err error) bool { return errors.Is(err, context.Canceled) }
	cases := []struct {
		name       string
		fault      func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error
		holdAnswer bool // Release's question is not answered
		during     func(ctx context.Context, s *Session, gl *gatedLease, cancel context.CancelFunc)
		want       func(error) bool
		lostSays   string
		// The hold's keys are gone as Release returns, before the
		// checks held back answer; else once they did.
		goneAtReturn bool
	}{
		{"lease revoked", revoke, false, nil, isLost, "was revoked", true},
		{"key deleted", deleteKey, false, nil, isNotHeld, "deleted by another client", true},
		{"no answer", revoke, true, giveUp(false), isCanceled, "was revoked", true},
		{"no answer, the session's check answered", deleteKey, true, giveUp(true), isCanceled, "deleted by another client", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			releaseVanished(t, c.fault, c.holdAnswer, c.during, c.want, c.lostSays, c.goneAtReturn)
		})
	}
}

func releaseVanished(t *testing.T, fault func(ctx context.Context, admin *clientv3.Client, s *Session, key string) error,
	holdAnswer bool, during func(ctx context.Context, s *Session, gl *gatedLease, cancel context.CancelFunc),
	want func(error) bool, lostSays string, goneAtReturn bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	prefix := "/test/" + t.Name()
	defer admin.Delete(context.Background(), prefix, clientv3.WithPrefix())
	gl := newGatedLease(cli.Lease, holdAnswer)
	cli.Lease = gl
	s, err := NewSession(cli, WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer gl.open() // before Close, which waits for the checks held back
	sem, err := NewSemaphore(cli, prefix, 1, WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	m := sem.(semService)
	events := sem.Subscribe(ctx)
	g, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	defer close(resume)
	stopKeepalive(ctx, t, s, resume)
	if err := fault(ctx, admin, s, g.Key); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the hold's key seen gone", func() bool {
		seen, err := call(ctx, s, func(r actor.Reply[bool]) { r.Answer(m.vanished == g.Created, nil) })
		return err == nil && seen
	})
	rctx, rcancel := context.WithCancel(context.WithValue(ctx, releaseAsks{}, true))
	defer rcancel()
	released := make(chan struct{})
	duringDone := make(chan struct{})
	if during != nil {
		dctx, dcancel := context.WithCancel(ctx)
		go func() {
			<-released
			dcancel()
		}()
		go func() {
			defer close(duringDone)
			during(dctx, s, gl, rcancel)
		}()
	} else {
		close(duringDone)
	}
	err = sem.Release(rctx, g)
	close(released)
	<-duringDone
	if !want(err) {
		t.Fatalf("Release after the key went: %v", err)
	}
	keys := func() int64 {
		resp, err := admin.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	if n := keys(); goneAtReturn && n != 0 {
		t.Fatalf("%d keys of the hold left as Release returned", n)
	}
	gl.open()
	lost := false
	for ev := range events {
		switch ev := ev.(type) {
		case primitives.Lost:
			if !errors.Is(ev.Err, primitives.ErrLost) || !strings.Contains(ev.Err.Error(), lostSays) {
				t.Fatalf("Lost with %v, want ErrLost saying %q", ev.Err, lostSays)
			}
			lost = true
		case primitives.Released:
			t.Fatal("hold ended Released after its key went")
		}
		if lost {
			break
		}
	}
	if !lost {
		t.Fatal("no Lost event")
	}
	testkit.Eventually(t, 10*time.Second, "the hold's keys gone from etcd", func() bool { return keys() == 0 })
}

// TestSemaphoreReleaseAfterItsSlotKeyWasDeleted: someone else deletes only
// the hold's slot key (etcdctl del), and Release comes while the hold's
// watch asks whether the lease lives. The hold was lost, as a lock's is when
// its key is deleted: Release returns an error wrapping ErrNotHeld, the hold
// ends Lost naming the slot key, never Released, and nothing of it is left
// in etcd.
func TestSemaphoreReleaseAfterItsSlotKeyWasDeleted(t *testing.T) {
	testkit.NoLeaks(t)
	cli := etcdtest.NewClient(t)
	gl := newGatedLease(cli.Lease, false)
	cli.Lease = gl
	slotKeyDeleted(t, cli, gl, func(ctx context.Context, sem semaphore.Service, g semaphore.Grant, deleteSlot func()) {
		deleteSlot()
		wait(ctx, t, gl.session.arrived, "lease check after the slot key went") // the hold's watch saw it go
		if err := sem.Release(ctx, g); !errors.Is(err, semaphore.ErrNotHeld) {
			t.Fatalf("Release after the slot key was deleted: %v, want ErrNotHeld", err)
		}
		gl.open()
	})
}

// TestSemaphoreSlotKeyDeletedAfterAFailedRelease: a Release fails (its
// delete does not answer before its ctx ends), the hold stands, and then
// someone else deletes its slot key alone. The hold ends Lost, as with no
// failed release before: that release deletes both keys in one
// transaction, so it cannot have deleted one alone. (A lock's hold ends
// Released there, since its one key's deletion may be the failed
// release's.)
func TestSemaphoreSlotKeyDeletedAfterAFailedRelease(t *testing.T) {
	testkit.NoLeaks(t)
	cli := etcdtest.NewClient(t)
	var silent atomic.Bool // the release's delete gets no answer
	prefix := "/test/" + t.Name()
	cli.KV = &hookedKV{KV: cli.KV, silentTxn: func(then []clientv3.Op) bool {
		return silent.Load() && len(then) > 0 && then[0].IsDelete() && strings.HasPrefix(string(then[0].KeyBytes()), prefix+"/q/")
	}}
	slotKeyDeleted(t, cli, nil, func(ctx context.Context, sem semaphore.Service, g semaphore.Grant, deleteSlot func()) {
		silent.Store(true)
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		err := sem.Release(rctx, g)
		rcancel()
		silent.Store(false)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Release whose delete got no answer: %v, want its ctx's error", err)
		}
		deleteSlot()
	})
}

// slotKeyDeleted acquires a semaphore of one permit on "/test/"+t.Name(),
// on a session of its own on cli (whose lease questions gl, if not nil,
// holds back), and runs run, which deletes the hold's slot key behind its
// back with deleteSlot. The hold must end Lost for its slot key, and
// nothing of it be left in etcd.
func slotKeyDeleted(t *testing.T, cli *clientv3.Client, gl *gatedLease,
	run func(ctx context.Context, sem semaphore.Service, g semaphore.Grant, deleteSlot func())) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := etcdtest.NewClient(t)
	prefix := "/test/" + t.Name()
	defer admin.Delete(context.Background(), prefix, clientv3.WithPrefix())
	s, err := NewSession(cli, WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if gl != nil {
		defer gl.open() // before Close, which waits for the checks held back
	}
	sem, err := NewSemaphore(cli, prefix, 1, WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	events := sem.Subscribe(ctx)
	g, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slotKey := prefix + "/slot/" + strconv.Itoa(g.Slot)
	run(ctx, sem, g, func() {
		if _, err := admin.Delete(ctx, slotKey); err != nil {
			t.Fatal(err)
		}
	})
	for ev := range events {
		switch ev := ev.(type) {
		case primitives.Lost:
			if !errors.Is(ev.Err, primitives.ErrLost) || !strings.Contains(ev.Err.Error(), "slot key "+slotKey+" deleted by another client") {
				t.Fatalf("Lost with %v, want ErrLost naming the slot key", ev.Err)
			}
			testkit.Eventually(t, 10*time.Second, "the hold's keys gone from etcd", func() bool {
				resp, err := admin.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				return err == nil && resp.Count == 0
			})
			return
		case primitives.Released:
			t.Fatal("hold ended Released after its slot key was deleted")
		}
	}
	t.Fatal("no Lost event")
}
