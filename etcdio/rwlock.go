package etcdio

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// rwlockService is rwlock.Service on a session, with the key layout and
// order of etcd's recipes.RWMutex: readers under prefix/read/, writers under
// prefix/write/, each key written once. A reader waits for every writer key
// written before its own, a writer for every key.
//
// Tokens come from an epoch key beside the prefix (prefix + EpochSuffix),
// which recipes.RWMutex never looks at:
//
//   - A writer that holds the lock advances the epoch, in a transaction that
//     also checks its own key still exists. Its token is that revision, so it
//     is above every token issued before.
//   - A reader that holds the lock reads the epoch. If a writer advanced it
//     last (or it does not exist yet), the reader advances it to a read epoch
//     with a compare-and-swap on its ModRevision; a reader that loses the
//     race reads again and joins the epoch the winner made. Its token is the
//     read epoch's revision. Every reader between two writers thus shares one
//     token, however late it came, and it is above the previous writer's.
//
// The epoch key has no lease: it must outlive every holder, and it is the one
// key a rwlock leaves behind. Tokens are sound only among disco holders: a
// recipes.RWMutex writer on the same prefix is excluded but does not advance
// the epoch.
type rwlockService struct{ holder }

// EpochSuffix is appended to a rwlock's prefix to name its epoch key.
const EpochSuffix = ".epoch"

// Epoch values: who advanced the epoch last.
const (
	readEpoch  = "read"
	writeEpoch = "write"
)

// NewRWLock returns a read/write lock on prefix, interoperable with etcd's
// recipes.RWMutex on the same prefix. Without WithSession it runs its own
// session, closed by its Close.
func NewRWLock(cli *clientv3.Client, prefix string, opts ...Option) (rwlock.Service, error) {
	l := &rwlockService{}
	l.errTaken = rwlock.ErrRWLockTaken
	l.tokenFor = l.token
	if err := l.start("rwlock", cli, prefix, opts, l, rwlock.ErrNotHeld, ownKeys("read/", "write/")); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rwlockService) queue(m rwlock.Mode) queue {
	if m == rwlock.Read {
		return queue{mode: int(m), keys: l.prefix + "read/", blockers: l.prefix + "write/"}
	}
	return queue{mode: int(m), keys: l.prefix + "write/", blockers: l.prefix}
}

func (l *rwlockService) epochKey() string { return l.prefix[:len(l.prefix)-1] + EpochSuffix }

// token issues the fencing token of a hold, as the type's doc describes.
func (l *rwlockService) token(ctx context.Context, h hold) (int64, error) {
	mine := clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.createRev)
	epoch := l.epochKey()
	if rwlock.Mode(h.mode) == rwlock.Write {
		resp, err := l.s.cli.Txn(ctx).If(mine).Then(clientv3.OpPut(epoch, writeEpoch)).Commit()
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("key %s is gone: %w", h.key, primitives.ErrLost)
		}
		return resp.Header.Revision, nil
	}
	for {
		resp, err := l.s.cli.Txn(ctx).If(mine).Then(clientv3.OpGet(epoch)).Commit()
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("key %s is gone: %w", h.key, primitives.ErrLost)
		}
		var seen int64
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if string(kvs[0].Value) == readEpoch {
				return kvs[0].ModRevision, nil // join the current read epoch
			}
			seen = kvs[0].ModRevision
		}
		resp, err = l.s.cli.Txn(ctx).
			If(mine, clientv3.Compare(clientv3.ModRevision(epoch), "=", seen)).
			Then(clientv3.OpPut(epoch, readEpoch)).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return resp.Header.Revision, nil
		}
		// Another reader advanced it first (or our key is gone): look again.
	}
}

func (l *rwlockService) grant(h hold) rwlock.Grant {
	return rwlock.Grant{FencingToken: fencing.Token(h.token), Key: h.key, LeaseID: int64(l.s.lease), TTL: l.ttl(), Mode: rwlock.Mode(h.mode), Created: h.createRev}
}

func (l *rwlockService) RLock(ctx context.Context) (rwlock.Grant, error) {
	h, err := l.acquire(ctx, l.queue(rwlock.Read), false)
	return l.grant(h), err
}

func (l *rwlockService) TryRLock(ctx context.Context) (rwlock.Grant, error) {
	h, err := l.acquire(ctx, l.queue(rwlock.Read), true)
	return l.grant(h), err
}

func (l *rwlockService) Lock(ctx context.Context) (rwlock.Grant, error) {
	h, err := l.acquire(ctx, l.queue(rwlock.Write), false)
	return l.grant(h), err
}

func (l *rwlockService) TryLock(ctx context.Context) (rwlock.Grant, error) {
	h, err := l.acquire(ctx, l.queue(rwlock.Write), true)
	return l.grant(h), err
}

func (l *rwlockService) RUnlock(ctx context.Context) error { return l.unlock(ctx, rwlock.Read) }

func (l *rwlockService) Unlock(ctx context.Context) error { return l.unlock(ctx, rwlock.Write) }

func (l *rwlockService) unlock(ctx context.Context, m rwlock.Mode) error {
	return l.release(ctx, func(h hold) bool { return rwlock.Mode(h.mode) == m })
}

func (l *rwlockService) Release(ctx context.Context, g rwlock.Grant) error {
	return l.release(ctx, func(h hold) bool {
		return h.key == g.Key && h.token == int64(g.FencingToken) && rwlock.Mode(h.mode) == g.Mode
	})
}
