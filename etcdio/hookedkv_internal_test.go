package etcdio

import (
	"context"
	"sync"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// hookedKV passes every transaction to etcd and hands its Then ops, response
// and error to commit (if set), whose answer the client gets instead: a
// member that lags, or whose answers are lost, as a test needs one. A
// transaction hold picks (if set) is not sent at all: the client hears
// etcd's "request timed out", and the transaction waits in held until the
// test sends it, late. A Get or transaction that silentGet or silentTxn
// picks (if set) is not sent either, and not answered: it waits for its
// context's end, as a request to a member that stopped answering does.
type hookedKV struct {
	clientv3.KV
	commit    func(then []clientv3.Op, resp *clientv3.TxnResponse, err error) (*clientv3.TxnResponse, error)
	hold      func(then []clientv3.Op) bool
	silentGet func(key string) bool
	silentTxn func(then []clientv3.Op) bool

	mu   sync.Mutex
	held []heldTxn
}

// heldTxn is a transaction hookedKV did not send.
type heldTxn struct {
	cmps            []clientv3.Cmp
	then, otherwise []clientv3.Op
}

// send commits t on cli.
func (t heldTxn) send(ctx context.Context, cli *clientv3.Client) (*clientv3.TxnResponse, error) {
	return cli.Txn(ctx).If(t.cmps...).Then(t.then...).Else(t.otherwise...).Commit()
}

// takeHeld returns the transactions held so far and forgets them.
func (k *hookedKV) takeHeld() []heldTxn {
	k.mu.Lock()
	defer k.mu.Unlock()
	h := k.held
	k.held = nil
	return h
}

func (k *hookedKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if k.silentGet != nil && k.silentGet(key) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return k.KV.Get(ctx, key, opts...)
}

func (k *hookedKV) Txn(ctx context.Context) clientv3.Txn {
	return &hookedTxn{Txn: k.KV.Txn(ctx), kv: k, ctx: ctx}
}

type hookedTxn struct {
	clientv3.Txn
	kv  *hookedKV
	ctx context.Context
	txn heldTxn
}

func (t *hookedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.txn.cmps = append(t.txn.cmps, cs...)
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *hookedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.txn.otherwise = append(t.txn.otherwise, ops...)
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *hookedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.txn.then = append(t.txn.then, ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *hookedTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.kv.silentTxn != nil && t.kv.silentTxn(t.txn.then) {
		<-t.ctx.Done()
		return nil, t.ctx.Err()
	}
	if t.kv.hold != nil && t.kv.hold(t.txn.then) {
		t.kv.mu.Lock()
		t.kv.held = append(t.kv.held, t.txn)
		t.kv.mu.Unlock()
		return nil, rpctypes.ErrTimeout
	}
	resp, err := t.Txn.Commit()
	if t.kv.commit == nil {
		return resp, err
	}
	return t.kv.commit(t.txn.then, resp, err)
}
