package etcdio

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives"
)

// TestLookNeverAnswersFromBeforeTheDelete: a waiter's look after a delete
// at revision R is first served from the local state of the member its
// client reaches, which may not have applied R yet. Such an answer (the
// deleted blocker still ahead, at a revision before R) must not be taken:
// the waiter would wait for an event it has already seen. The look then
// asks again, linearizably, and answers from R or later.
//
// A lagging member is simulated on the client: its serializable reads are
// answered as a member still at R-1 would answer them. (The cluster's
// proxies cannot hold one member back: a member also receives the leader's
// messages over connections it dialed itself, through the leader's proxy.)
func TestLookNeverAnswersFromBeforeTheDelete(t *testing.T) {
	f := newLagFixture(t, func(after int64, ahead *mvccpb.KeyValue) func(*clientv3.TxnResponse) {
		return func(resp *clientv3.TxnResponse) {
			resp.Header.Revision = after - 1
			resp.Responses[0].GetResponseRange().Kvs = []*mvccpb.KeyValue{ahead}
		}
	})
	next, rev, err := f.svc.look(f.ctx, f.w, f.after, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.served.Load() == 0 {
		t.Fatal("the look made no serializable read (the simulated lag was never met)")
	}
	if rev < f.after || next != nil {
		t.Fatalf("look answered from revision %d (ahead: %v), before the delete at %d", rev, next, f.after)
	}
}

// TestStillAheadNeverAnswersFromBeforeTheDelete: a waiter whose watch etcd
// confirmed at revision R reads the queue only if its blocker is gone by R
// (look with still). That check is first served from a member's own state;
// a member that has not applied the blocker's deletion (before R) would
// still show it, and the waiter would wait for a deletion its watch never
// delivers. The check then asks again, linearizably.
func TestStillAheadNeverAnswersFromBeforeTheDelete(t *testing.T) {
	f := newLagFixture(t, func(after int64, _ *mvccpb.KeyValue) func(*clientv3.TxnResponse) {
		return func(resp *clientv3.TxnResponse) {
			resp.Header.Revision = after - 1
			resp.Succeeded = true // as before the delete: both keys there
		}
	})
	next, rev, err := f.svc.look(f.ctx, f.w, f.after, f.ahead)
	if err != nil {
		t.Fatal(err)
	}
	if f.served.Load() == 0 {
		t.Fatal("the check made no serializable read (the simulated lag was never met)")
	}
	if rev < f.after || next != nil {
		t.Fatalf("look answered from revision %d (ahead: %v), before the delete at %d", rev, next, f.after)
	}
}

// lagFixture is a waiter whose blocker was deleted at revision after, and a
// service whose client's serializable reads are answered by lagged.
type lagFixture struct {
	ctx   context.Context
	svc   *service
	w     *waiter
	ahead *mvccpb.KeyValue
	after int64
	// served counts the serializable reads answered as the lagging
	// member would.
	served atomic.Int32
}

func newLagFixture(t *testing.T, lagged func(after int64, ahead *mvccpb.KeyValue) func(*clientv3.TxnResponse)) *lagFixture {
	t.Helper()
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)

	prefix := "/test/look-lagging/" + t.Name()
	blocker, err := cli.Put(ctx, prefix+"/blocker", "")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := cli.Put(ctx, prefix+"/mine", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Delete(context.Background(), prefix, clientv3.WithPrefix()) })
	del, err := cli.Delete(ctx, prefix+"/blocker")
	if err != nil {
		t.Fatal(err)
	}
	f := &lagFixture{ctx: ctx, after: del.Header.Revision,
		ahead: &mvccpb.KeyValue{Key: []byte(prefix + "/blocker"), CreateRevision: blocker.Header.Revision,
			ModRevision: blocker.Header.Revision, Version: 1}}
	// Every serializable read is answered as a lagging member would: run,
	// then rewritten.
	answer := lagged(f.after, f.ahead)
	cli.KV = &hookedKV{KV: cli.KV, commit: func(then []clientv3.Op, resp *clientv3.TxnResponse, err error) (*clientv3.TxnResponse, error) {
		if err == nil && slices.ContainsFunc(then, func(op clientv3.Op) bool { return op.IsGet() && op.IsSerializable() }) {
			f.served.Add(1)
			answer(resp)
		}
		return resp, err
	}}
	if f.svc, err = newService(lockSpec, cli, prefix, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.svc.Close() })
	f.w = &waiter{key: prefix + "/mine", created: mine.Header.Revision, blockers: prefix + "/blocker"}
	return f
}

// look given the blocker a waiter waited behind: that blocker while it is
// there, else what is ahead now; ErrLost when the waiter's own key is gone.
func TestLookBehindStill(t *testing.T) {
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := "/test/look-still"
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	// Every owner's key has a lease: a key without one is no queue member.
	lease, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Revoke(context.Background(), lease.ID)
	put := func(key string) *mvccpb.KeyValue {
		t.Helper()
		resp, err := cli.Put(ctx, prefix+"/"+key, "", clientv3.WithLease(lease.ID))
		if err != nil {
			t.Fatal(err)
		}
		return &mvccpb.KeyValue{Key: []byte(prefix + "/" + key), CreateRevision: resp.Header.Revision}
	}
	first, second, mine := put("a"), put("b"), put("mine")
	svc, err := newService(lockSpec, cli, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	w := &waiter{key: string(mine.Key), created: mine.CreateRevision, blockers: prefix + "/"}

	next, _, err := svc.look(ctx, w, mine.CreateRevision, second)
	if err != nil || next == nil || !sameKey(next, second) {
		t.Fatalf("blocker still there: %v, %v; want it", next, err)
	}
	if _, err := cli.Delete(ctx, string(second.Key)); err != nil {
		t.Fatal(err)
	}
	next, _, err = svc.look(ctx, w, mine.CreateRevision, second)
	if err != nil || next == nil || string(next.Key) != string(first.Key) {
		t.Fatalf("blocker gone: %v, %v; want the key before it", next, err)
	}
	if _, err := cli.Delete(ctx, string(mine.Key)); err != nil {
		t.Fatal(err)
	}
	if _, _, err = svc.look(ctx, w, mine.CreateRevision, first); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("own key gone: %v, want ErrLost", err)
	}
}

// look with no blocker to compare (after a delete event) when the waiter's
// own key is already gone: the transaction's If fails and it has no Else
// branch, so the answer has no responses at all. That is an answer (the
// key is gone: ErrLost), never an index out of range on a helper goroutine.
func TestLookOwnKeyGoneAfterDelete(t *testing.T) {
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prefix := "/test/look-own-gone"
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	if _, err := cli.Put(ctx, prefix+"/a", ""); err != nil {
		t.Fatal(err)
	}
	mine, err := cli.Put(ctx, prefix+"/mine", "")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := newService(lockSpec, cli, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	w := &waiter{key: prefix + "/mine", created: mine.Header.Revision, blockers: prefix + "/"}
	del, err := cli.Delete(ctx, w.key)
	if err != nil {
		t.Fatal(err)
	}
	next, _, err := svc.look(ctx, w, del.Header.Revision, nil)
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("own key gone: look answered %v, %v; want ErrLost", next, err)
	}
}
