package etcdio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives/barrier"
)

// etcdBarrier is barrier.Barrier on etcd with the layout of etcd's
// recipes.Barrier: the barrier is held while its key exists. The key has no
// lease, as the recipe's has none: the barrier outlives its holder.
type etcdBarrier struct {
	cli  *clientv3.Client
	key  string
	name string
}

// NewBarrier returns a barrier held while key exists, interoperable with
// etcd's recipes.Barrier on the same key. It needs no session: the key has no
// lease. The caller owns cli.
func NewBarrier(cli *clientv3.Client, key string) (barrier.Barrier, error) {
	if err := checkPrefix(key); err != nil {
		return nil, fmt.Errorf("etcdio: new barrier %s: %w", quote(key), err)
	}
	if err := checkClient(cli); err != nil {
		return nil, fmt.Errorf("etcdio: new barrier %s: %w", quote(key), err)
	}
	return &etcdBarrier{cli: cli, key: key, name: "barrier " + quote(key)}, nil
}

// Hold creates the barrier key if it does not exist.
func (b *etcdBarrier) Hold(ctx context.Context) error {
	resp, err := b.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(b.key), "=", 0)).
		Then(clientv3.OpPut(b.key, "")).Commit()
	if err != nil {
		return fmt.Errorf("etcdio: %s: hold: %w", b.name, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdio: %s: %w", b.name, barrier.ErrHeld)
	}
	return nil
}

// Release deletes the barrier key.
func (b *etcdBarrier) Release(ctx context.Context) error {
	resp, err := b.cli.Delete(ctx, b.key)
	if err != nil {
		return fmt.Errorf("etcdio: %s: release: %w", b.name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("etcdio: %s: %w", b.name, barrier.ErrNotHeld)
	}
	return nil
}

// Wait watches the key until it is absent.
func (b *etcdBarrier) Wait(ctx context.Context) error {
	if err := awaitKey(ctx, b.cli, b.key, func(kv *mvccpb.KeyValue) bool { return kv == nil }); err != nil {
		return fmt.Errorf("etcdio: %s: wait: %w", b.name, err)
	}
	return nil
}

// awaitKey returns once done holds for key (kv nil: absent): checked with a
// read once a watch of key is in place, and after each of its events.
func awaitKey(ctx context.Context, cli *clientv3.Client, key string, done func(kv *mvccpb.KeyValue) bool) error {
	return await(ctx, cli, awaiter{key: key,
		check: func(ctx context.Context) (bool, error) {
			resp, err := cli.Get(ctx, key)
			if err != nil {
				return false, err
			}
			var kv *mvccpb.KeyValue
			if len(resp.Kvs) > 0 {
				kv = resp.Kvs[0]
			}
			return done(kv), nil
		},
		event: func(ev *clientv3.Event) (bool, error) {
			if ev.Type == mvccpb.DELETE {
				return done(nil), nil
			}
			return done(ev.Kv), nil
		},
	})
}

// awaiter is a wait on a watch of key (opts: WithPrefix, ...): check reads
// once the watch is in place, event looks at each event; either ends the
// wait with true, or with an error that is final. A check that fails is
// transient: the watch is reopened.
type awaiter struct {
	key   string
	opts  []clientv3.OpOption
	check func(ctx context.Context) (bool, error)
	event func(ev *clientv3.Event) (bool, error)
}

// errFinal marks an error of an awaiter's event or check that ends the wait.
type errFinal struct{ error }

func (e errFinal) Unwrap() error { return e.error }

// await runs a's wait until it ends, ctx ends (ctx's error, unwrapped) or
// the client is closed. The watch starts from the current revision, so etcd
// serves it in sync (a watch from a past revision is served by its catch-up
// path, up to 100 ms late). A watch that ends early (the member lost its
// leader, a compaction) is reopened after a short pause.
func await(ctx context.Context, cli *clientv3.Client, a awaiter) error {
	for {
		ok, err := awaitOnce(ctx, cli, a)
		var final errFinal
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case ok:
			return nil
		case errors.As(err, &final):
			return final.error
		case cli.Ctx().Err() != nil:
			return fmt.Errorf("watch %s: %w", a.key, ErrClientClosed)
		}
		ctxtime.Sleep(ctx, 50*time.Millisecond)
	}
}

// awaitOnce is one watch of await. A false without an errFinal means the
// watch ended early.
func awaitOnce(ctx context.Context, cli *clientv3.Client, a awaiter) (bool, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := append([]clientv3.OpOption{clientv3.WithCreatedNotify()}, a.opts...)
	for wresp := range cli.Watch(wctx, a.key, opts...) {
		if wresp.Created {
			if ok, err := a.check(ctx); ok || err != nil {
				return ok, err // an error other than errFinal is transient
			}
		}
		for _, ev := range wresp.Events {
			if ok, err := a.event(ev); ok || err != nil {
				return ok, errFinal{err}
			}
		}
		if wresp.Err() != nil {
			return false, nil
		}
	}
	return false, nil
}
