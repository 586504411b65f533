package etcdio

import (
	"context"
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

// Wait reads the key and, while it exists, watches it for its deletion.
func (b *etcdBarrier) Wait(ctx context.Context) error {
	for {
		resp, err := b.cli.Get(ctx, b.key, clientv3.WithKeysOnly())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("etcdio: %s: wait: %w", b.name, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		seen, err := awaitEvent(ctx, b.cli, b.key, resp.Header.Revision+1, mvccpb.DELETE)
		if err != nil || seen {
			return err
		}
	}
}

// awaitEvent watches key from rev until an event of type typ, and reports
// whether it saw one. A watch that ends without it (compacted, cancelled by
// the server) reports false after a short pause, and the caller reads
// again; ctx's end is its error.
func awaitEvent(ctx context.Context, cli *clientv3.Client, key string, rev int64, typ mvccpb.Event_EventType) (bool, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wresp := range cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		for _, ev := range wresp.Events {
			if ev.Type == typ {
				return true, nil
			}
		}
		if wresp.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if cli.Ctx().Err() != nil {
		return false, fmt.Errorf("watch %s: %w", key, ErrClientClosed)
	}
	ctxtime.Sleep(ctx, 50*time.Millisecond)
	return false, ctx.Err()
}
