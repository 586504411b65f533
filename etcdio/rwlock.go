package etcdio

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
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
// key a rwlock leaves behind; RetireRWLock removes it when the lock's name is
// retired. Tokens are sound only among disco holders: a
// recipes.RWMutex writer on the same prefix is excluded but does not advance
// the epoch.
type rwlockService struct{ *service }

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
	svc, err := newService(rwlockSpec, cli, prefix, opts)
	if err != nil {
		return nil, err
	}
	return rwlockService{svc}, nil
}

var rwlockSpec = &spec{kind: "rwlock", errTaken: rwlock.ErrRWLockTaken, errNotHeld: rwlock.ErrNotHeld,
	ownQueues: []string{"read/", "write/"}, token: rwlockToken}

func (l rwlockService) queue(m rwlock.Mode) queue {
	if m == rwlock.Read {
		return queue{mode: m, keys: l.prefix + "read/", blockers: l.prefix + "write/", value: l.value}
	}
	return queue{mode: m, keys: l.prefix + "write/", blockers: l.prefix, value: l.value}
}

// epochKey is the rwlock's epoch key: its prefix + EpochSuffix.
func epochKey(svc *service) string { return svc.prefix[:len(svc.prefix)-1] + EpochSuffix }

// rwlockToken issues the fencing token of a driver.Hold, as rwlockService's doc
// describes. It runs on a session helper before the grant is recorded. Each
// request is made in attempts; a repeat is harmless: a writer's repeat
// opens a later write epoch (the lock is its alone), and a reader's repeat
// of an epoch's opening that landed finds the read epoch open and joins it.
func rwlockToken(ctx context.Context, svc *service, g driver.Hold) (int64, error) {
	mine := clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Created)
	epoch := epochKey(svc)
	txn := func(cmps []clientv3.Cmp, op clientv3.Op) (*clientv3.TxnResponse, error) {
		resp, _, err := svc.s.txn(ctx, cmps, []clientv3.Op{op})
		return resp, err
	}
	if g.Mode == rwlock.Write {
		resp, err := txn([]clientv3.Cmp{mine}, clientv3.OpPut(epoch, writeEpoch))
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("key %s is gone: %w", g.Key, primitives.ErrLost)
		}
		return resp.Header.Revision, nil
	}
	for {
		resp, err := txn([]clientv3.Cmp{mine}, clientv3.OpGet(epoch))
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("key %s is gone: %w", g.Key, primitives.ErrLost)
		}
		var seen int64
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			if string(kvs[0].Value) == readEpoch {
				return kvs[0].ModRevision, nil // join the current read epoch
			}
			seen = kvs[0].ModRevision
		}
		resp, err = txn([]clientv3.Cmp{mine, clientv3.Compare(clientv3.ModRevision(epoch), "=", seen)},
			clientv3.OpPut(epoch, readEpoch))
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return resp.Header.Revision, nil
		}
		// Another reader advanced it first (or our key is gone): look again.
	}
}

func (l rwlockService) grant(g driver.Hold, err error) (rwlock.Grant, error) {
	if err != nil {
		return rwlock.Grant{}, err
	}
	return rwlock.Grant{FencingToken: g.Token, Key: g.Key, LeaseID: g.LeaseID, TTL: l.s.ttl, Mode: g.Mode, Created: g.Created}, nil
}

func (l rwlockService) RLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, l.queue(rwlock.Read), false))
}

func (l rwlockService) TryRLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, l.queue(rwlock.Read), true))
}

func (l rwlockService) Lock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, l.queue(rwlock.Write), false))
}

func (l rwlockService) TryLock(ctx context.Context) (rwlock.Grant, error) {
	return l.grant(l.acquire(ctx, l.queue(rwlock.Write), true))
}

func (l rwlockService) RUnlock(ctx context.Context) error { return l.unlock(ctx, rwlock.Read) }

func (l rwlockService) Unlock(ctx context.Context) error { return l.unlock(ctx, rwlock.Write) }

func (l rwlockService) unlock(ctx context.Context, m rwlock.Mode) error {
	return l.release(ctx, func(g driver.Hold) bool { return g.Mode == m })
}

func (l rwlockService) Release(ctx context.Context, g rwlock.Grant) error {
	return l.release(ctx, driver.CreatedAt(g.Created))
}

// ErrInUse is returned by RetireRWLock while keys of the lock still exist.
var ErrInUse = errors.New("etcdio: in use")

// RetireRWLock deletes the epoch key of the rwlock on prefix, the one key an
// rwlock leaves in etcd after every holder is gone (it has no lease, since
// tokens must keep increasing across holders). Call it when the lock's name
// is retired for good: a later rwlock on the same prefix starts its epochs
// afresh, still above every earlier token (tokens are etcd revisions). It
// fails with an error wrapping ErrInUse, deleting nothing, while any key of
// the lock (a holder or waiter, of disco or recipes.RWMutex: a key in its
// read/ or write/ queue) exists; keys of nested names elsewhere under
// prefix do not count (a name under NAME/read/ or NAME/write/ does).
func RetireRWLock(ctx context.Context, cli *clientv3.Client, prefix string) error {
	if err := checkPrefix(prefix); err != nil {
		return fmt.Errorf("etcdio: retire rwlock %s: %w", quote.Name(prefix), err)
	}
	if err := checkClient(cli); err != nil {
		return fmt.Errorf("etcdio: retire rwlock %s: %w", quote.Name(prefix), err)
	}
	if ctx == nil {
		return fmt.Errorf("etcdio: retire rwlock %s: %w", quote.Name(prefix), driver.ContextErr(ctx))
	}
	// The lock's keys are in its two queues; a nested name's keys, elsewhere
	// under prefix/, are not the lock's.
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(prefix+"/read/"), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(prefix+"/write/"), "=", 0).WithPrefix()).
		Then(clientv3.OpDelete(prefix + EpochSuffix)).Commit()
	if err != nil {
		return fmt.Errorf("etcdio: retire rwlock %s: %w", quote.Name(prefix), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdio: retire rwlock %s: keys under it exist: %w", quote.Name(prefix), ErrInUse)
	}
	return nil
}
