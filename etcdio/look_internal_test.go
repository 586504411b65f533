package etcdio

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
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
	cli, err := embedded.NewClient(etcdtest.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const prefix = "/test/look-lagging"
	blocker, err := cli.Put(ctx, prefix+"/blocker", "")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := cli.Put(ctx, prefix+"/mine", "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	del, err := cli.Delete(ctx, prefix+"/blocker")
	if err != nil {
		t.Fatal(err)
	}
	after := del.Header.Revision
	ahead := &mvccpb.KeyValue{Key: []byte(prefix + "/blocker"), CreateRevision: blocker.Header.Revision,
		ModRevision: blocker.Header.Revision, Version: 1}

	lag := &laggingKV{KV: cli.KV, answer: func(resp *clientv3.TxnResponse) {
		resp.Header.Revision = after - 1
		resp.Responses[0].GetResponseRange().Kvs = []*mvccpb.KeyValue{ahead}
	}}
	cli.KV = lag
	svc, err := newService(lockSpec, cli, prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	w := &waiter{key: prefix + "/mine", created: mine.Header.Revision, blockers: prefix + "/blocker"}

	next, rev, err := svc.look(ctx, w, after)
	if err != nil {
		t.Fatal(err)
	}
	if lag.served.Load() == 0 {
		t.Fatal("the look made no serializable read (the simulated lag was never met)")
	}
	if rev < after || next != nil {
		t.Fatalf("look answered from revision %d (ahead: %v), before the delete at %d", rev, next, after)
	}
}

// laggingKV answers every serializable transaction as a lagging member
// would: it runs it, then rewrites the response with answer.
type laggingKV struct {
	clientv3.KV
	answer func(*clientv3.TxnResponse)
	served atomic.Int32
}

func (k *laggingKV) Txn(ctx context.Context) clientv3.Txn {
	return &laggingTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type laggingTxn struct {
	clientv3.Txn
	kv           *laggingKV
	serializable bool
}

func (t *laggingTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *laggingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *laggingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		if op.IsGet() && op.IsSerializable() {
			t.serializable = true
		}
	}
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *laggingTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.serializable && resp.Succeeded {
		t.kv.served.Add(1)
		t.kv.answer(resp)
	}
	return resp, err
}
