package etcdio

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
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
// lease. Without a session, its Wait's watch runs on the caller's goroutine:
// the one watch in this package that no session keeps, and so the one
// without follow's liveness check (see Wait). The caller owns cli.
func NewBarrier(cli *clientv3.Client, key string) (barrier.Barrier, error) {
	if err := checkPrefix(key); err != nil {
		return nil, fmt.Errorf("etcdio: new barrier %s: %w", quote.Name(key), err)
	}
	if err := checkClient(cli); err != nil {
		return nil, fmt.Errorf("etcdio: new barrier %s: %w", quote.Name(key), err)
	}
	return &etcdBarrier{cli: cli, key: key, name: "barrier " + quote.Name(key)}, nil
}

// ctxOr returns what a request made under ctx that failed with err should
// report: ctx's end if it ended or its deadline passed (see ctxtime.Ended), err
// otherwise.
func ctxOr(ctx context.Context, err error) error {
	if e := ctxtime.Ended(ctx); e != nil {
		return e
	}
	return err
}

// Hold creates the barrier key if it does not exist. If ctx ends first, the
// error wraps ctx.Err().
func (b *etcdBarrier) Hold(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("etcdio: %s: hold: %w", b.name, err)
	}
	resp, err := b.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(b.key), "=", 0)).
		Then(clientv3.OpPut(b.key, "")).Commit()
	if err != nil {
		return fmt.Errorf("etcdio: %s: hold: %w", b.name, ctxOr(ctx, err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdio: %s: %w", b.name, barrier.ErrHeld)
	}
	return nil
}

// Release deletes the barrier key. If ctx ends first, the error wraps
// ctx.Err().
func (b *etcdBarrier) Release(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("etcdio: %s: release: %w", b.name, err)
	}
	resp, err := b.cli.Delete(ctx, b.key)
	if err != nil {
		return fmt.Errorf("etcdio: %s: release: %w", b.name, ctxOr(ctx, err))
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("etcdio: %s: %w", b.name, barrier.ErrNotHeld)
	}
	return nil
}

// Wait returns once the key is absent: at once if it is, or when a watch of
// it sees it deleted. It fails with ctx's error when ctx ends, or with an
// error wrapping ErrClientClosed once the client is closed.
//
// The watch runs on the caller's goroutine: a barrier has no session, so no
// loop or helper to own it. A watch that fails is reopened, but nothing checks
// that a silent one is alive: if its member is cut off from the client, Wait
// waits until ctx ends, or until the client drops the connection itself,
// which takes gRPC keepalives (clientv3.Config DialKeepAliveTime and
// DialKeepAliveTimeout; see the package doc).
func (b *etcdBarrier) Wait(ctx context.Context) error {
	return ctxtime.Alone(ctx, b.wait(ctx)) // ctx.Err() itself, as barrier.Barrier promises
}

func (b *etcdBarrier) wait(ctx context.Context) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("etcdio: %s: wait: %w", b.name, err)
	}
	for {
		if b.absent(ctx) {
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("etcdio: %s: wait: %w", b.name, ctx.Err())
		case b.cli.Ctx().Err() != nil:
			return fmt.Errorf("etcdio: %s: wait: watch %s: %w", b.name, b.key, ErrClientClosed)
		}
		ctxtime.Sleep(ctx, 50*time.Millisecond)
	}
}

// absent is one watch of Wait: true once the key is seen absent, by a read
// once the watch is in place (it starts from the current revision, so etcd
// serves it in sync, without its catch-up path's delay) or by a delete
// event; false if the watch ended first (ctx, a member without a leader, a
// compaction, a failed read).
func (b *etcdBarrier) absent(ctx context.Context) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wresp := range b.cli.Watch(wctx, b.key, clientv3.WithCreatedNotify(), clientv3.WithFilterPut()) {
		if wresp.Created {
			resp, err := b.cli.Get(ctx, b.key, clientv3.WithCountOnly())
			if err != nil {
				return false
			}
			if resp.Count == 0 {
				return true
			}
		}
		if len(wresp.Events) > 0 {
			return true // a delete: puts are filtered
		}
		if wresp.Err() != nil {
			return false
		}
	}
	return false
}
