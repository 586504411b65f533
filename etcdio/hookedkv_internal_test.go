package etcdio

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// hookedKV passes every transaction to etcd and hands its Then ops, response
// and error to commit, whose answer the client gets instead: a member that
// lags, or whose answers are lost, as a test needs one.
type hookedKV struct {
	clientv3.KV
	commit func(then []clientv3.Op, resp *clientv3.TxnResponse, err error) (*clientv3.TxnResponse, error)
}

func (k *hookedKV) Txn(ctx context.Context) clientv3.Txn {
	return &hookedTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type hookedTxn struct {
	clientv3.Txn
	kv   *hookedKV
	then []clientv3.Op
}

func (t *hookedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *hookedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *hookedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.then = append(t.then, ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *hookedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	return t.kv.commit(t.then, resp, err)
}
