package etcdio

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// TestFailedReleaseOfAKeySeenGoneLongAgo: a release whose delete does not
// answer while someone else deletes the hold's key, seen gone by the
// session's watch of its own keys, then more deletions of the session's
// keys on the same queue than that watch remembers (more than 16), before
// the release fails with its ctx. The release settles as one whose key went
// (the delete may have been its own): the hold ends. Before, the watch had
// forgotten the deletion by then, the hold stood, and nothing ever ended
// it: the watch reports each deletion once, while the release was in
// flight and the hold left alone.
func TestFailedReleaseOfAKeySeenGoneLongAgo(t *testing.T) {
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	kv := &hookedKV{KV: cli.KV}
	cli.KV = kv
	prefix := "/test/" + t.Name()
	defer admin.Delete(context.Background(), prefix, clientv3.WithPrefix())
	s, err := NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reader := func() rwlockService {
		l, err := NewRWLock(cli, prefix, WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l.(rwlockService)
	}
	r0, r1, rx := reader(), reader(), reader()
	onLoop := func(f func() bool) bool {
		ok, err := call(ctx, s, func(r actor.Reply[bool]) { r.Answer(f(), nil) })
		return err == nil && ok
	}
	readers := func(svc *service) *mirror { return svc.mirrorOf(s.ownPrefix(svc.prefix + "read/")) }
	if _, err := r0.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	// r0's hold has the session's readers' keys watched and loaded, before
	// r1's key is made: the watch knows of r1's key only from its deletion.
	testkit.Eventually(t, 10*time.Second, "r0's watch of its own keys loaded", func() bool {
		return onLoop(func() bool { m := readers(r0.service); return m != nil && m.ready })
	})
	g1, err := r1.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "r1 on the same watch", func() bool {
		return onLoop(func() bool {
			m := readers(r1.service)
			return m != nil && m == readers(r0.service) && m.loadRev < g1.Created
		})
	})
	sent := make(chan struct{})
	var once sync.Once
	kv.silentTxn = func(then []clientv3.Op) bool {
		for _, op := range then {
			if op.IsDelete() && string(op.KeyBytes()) == g1.Key {
				once.Do(func() { close(sent) })
				return true
			}
		}
		return false
	}
	uctx, ucancel := context.WithCancel(ctx)
	defer ucancel()
	unlocked := make(chan error, 1)
	go func() { unlocked <- r1.RUnlock(uctx) }()
	select {
	case <-sent:
	case <-ctx.Done():
		t.Fatal("no delete from RUnlock")
	}
	if _, err := admin.Delete(ctx, g1.Key); err != nil {
		t.Fatal(err)
	}
	var last rwlock.Grant
	for range 17 {
		if last, err = rx.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := rx.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the deletions seen", func() bool {
		return onLoop(func() bool { return readers(r1.service).gone(last.Key, last.Created) })
	})
	ucancel()
	err = <-unlocked
	if g, held := r1.Current(); held {
		t.Fatalf("RUnlock returned %v; the hold of %s stands, its key gone", err, g.Key)
	}
}
