package etcdio

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// semService is semaphore.Service on a session. Its keys, for a semaphore
// named prefix with N permits:
//
//   - prefix + PermitsSuffix: N, in decimal. Written once, by the first user
//     of the name, with no lease; every acquisition's transaction checks it,
//     so a user that disagrees on N never writes a key. RetireSemaphore
//     removes it.
//   - prefix/q/...: the queue. Each acquisition writes a fresh key on its
//     session's lease; it holds a permit once fewer than N keys created
//     before its own are left, so at most N hold, served in order.
//   - prefix/slot/<i>: who owns slot i, 0 <= i < N: a holder's key name and
//     CreateRevision, on the holder's lease. A holder claims the lowest slot
//     whose key is absent or names a queue key that no longer exists, with a
//     compare-and-swap on the slot key's ModRevision, so no slot is ever
//     owned by two holders at once. Its fencing token is the revision of
//     that claim: strictly increasing per name, and so per slot.
//
// A release deletes the queue key and, in the same transaction, the slot key
// if the claim is still the holder's. A holder that loses its queue key
// (deleted by someone else) leaves a slot key naming a key that is gone: the
// next claimant takes the slot over, with a higher token that a guard of the
// slot's scope then prefers. A lost lease takes both keys.
//
// An uncontended Acquire is two writes: the queue key (with a read of the
// queue and the slots in the same transaction) and the slot's claim. A
// waiter watches the queue's deletions and counts down the keys ahead of it;
// on its turn it claims the slot the release freed. Every waiter receives
// every release's watch event, which is fine for the tens of owners a
// semaphore has, not for thousands.
type semService struct {
	*service
	*semState
}

// semState is what one semaphore service knows beyond its service.
type semState struct {
	n        int
	nameArg  string // the name as its user passed it
	cfgKey   string // prefix + PermitsSuffix
	queueDir string // prefix/q/
	slotDir  string // prefix/slot/

	mu   sync.Mutex
	held claimed // the slot of the service's latest claim
	snap snapshot
}

// PermitsSuffix is appended to a semaphore's prefix to name the key that
// stores its number of permits.
const PermitsSuffix = ".permits"

// maxPermits bounds N: a semaphore's holders each read every slot key.
const maxPermits = 1 << 12

// NewSemaphore returns a semaphore on prefix with n permits (1 <= n <=
// 4096). The first user of a prefix records n beside it (prefix +
// PermitsSuffix); a later user with another n gets an error wrapping
// semaphore.ErrPermitMismatch, and nothing of its own is left in etcd.
// Without WithSession it runs its own session, closed by its Close.
func NewSemaphore(cli *clientv3.Client, prefix string, n int, opts ...Option) (semaphore.Service, error) {
	fail := func(err error) error { return fmt.Errorf("etcdio: new semaphore %s: %w", quote(prefix), err) }
	o, err := checkArgs(cli, prefix, opts)
	if err != nil {
		return nil, fail(err)
	}
	if n < 1 || n > maxPermits {
		return nil, fail(fmt.Errorf("%d permits, want 1 to %d: %w", n, maxPermits, ErrInvalidArgument))
	}
	st := &semState{n: n, nameArg: prefix, cfgKey: prefix + PermitsSuffix, queueDir: prefix + "/q/", slotDir: prefix + "/slot/"}
	created, err := st.agree(o.ctx, cli)
	if err != nil {
		return nil, fail(err)
	}
	sp := &spec{kind: "semaphore", errTaken: semaphore.ErrNoPermit, errNotHeld: semaphore.ErrNotHeld,
		ownQueues: []string{"q/"}, token: st.claim}
	svc, err := newService(sp, cli, prefix, opts)
	if err != nil {
		if created {
			// Undo the record of n, unless someone uses the name meanwhile.
			_ = retireSemaphore(o.ctx, cli, prefix)
		}
		return nil, err
	}
	return semService{svc, st}, nil
}

// agree records n for the name if nobody has, and checks it otherwise. It
// reports whether it wrote the record.
func (st *semState) agree(ctx context.Context, cli *clientv3.Client) (bool, error) {
	want := strconv.Itoa(st.n)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(st.cfgKey), "=", 0)).
		Then(clientv3.OpPut(st.cfgKey, want)).Else(clientv3.OpGet(st.cfgKey)).Commit()
	if err != nil {
		return false, fmt.Errorf("record %d permits: %w", st.n, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	var have string
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		have = string(kvs[0].Value)
	}
	if have != want {
		return false, fmt.Errorf("%s says %q permits, this user %d: %w", st.cfgKey, have, st.n, semaphore.ErrPermitMismatch)
	}
	return false, nil
}

func (m semService) Acquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.acquireSem(ctx, false))
}

func (m semService) TryAcquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.acquireSem(ctx, true))
}

func (m semService) grant(g grant, err error) (semaphore.Grant, error) {
	if err != nil {
		return semaphore.Grant{}, err
	}
	return semaphore.Grant{FencingToken: fencing.Token(g.token), Key: g.key, LeaseID: int64(m.s.lease), TTL: m.s.ttl,
		Name: m.nameArg, Slot: m.slotOf(g.created), Created: g.created}, nil
}

// Release deletes g's queue key and, in the same transaction, its slot key
// if the slot is still g's, only if the key is still g's, so a late retry
// never frees a newer hold.
func (m semService) Release(ctx context.Context, g semaphore.Grant) error {
	same := exactly(g.Created, g.Key, g.FencingToken)
	match := func(h grant) bool { return same(h) && m.slotOf(h.created) == g.Slot }
	cur, err := m.withGrant(ctx, match, func(g *grant) { g.releasing++ })
	if err != nil {
		return err
	}
	slotKey := m.slotDir + strconv.Itoa(g.Slot)
	freeSlot := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(slotKey), "=", cur.token)},
		[]clientv3.Op{clientv3.OpDelete(slotKey)}, nil)
	resp, terr := m.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(cur.key), "=", cur.created)).
		Then(clientv3.OpDelete(cur.key), freeSlot).Commit()
	_, err = call(context.WithoutCancel(ctx), m.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, m.released(cur, resp, terr))
	})
	return err
}

// RetireSemaphore deletes the record of the number of permits of the
// semaphore on prefix (prefix + PermitsSuffix), the one key a semaphore
// leaves in etcd after every holder is gone. Call it when the name is retired
// for good, or to change its number of permits while nobody uses it. It
// fails with an error wrapping ErrInUse, deleting nothing, while a holder or
// waiter of the semaphore exists. It also deletes slot claims left by holders
// that are gone (a Close on a shared session leaves its claim, named after a
// key that no longer exists, until the session's lease ends).
func RetireSemaphore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	fail := func(err error) error { return fmt.Errorf("etcdio: retire semaphore %s: %w", quote(prefix), err) }
	if err := checkPrefix(prefix); err != nil {
		return fail(err)
	}
	if err := checkClient(cli); err != nil {
		return fail(err)
	}
	return retireSemaphore(ctx, cli, prefix)
}

func retireSemaphore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(prefix+"/q/"), "=", 0).WithPrefix()).
		Then(clientv3.OpDelete(prefix+PermitsSuffix), clientv3.OpDelete(prefix+"/slot/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("etcdio: retire semaphore %s: %w", quote(prefix), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdio: retire semaphore %s: keys under it exist: %w", quote(prefix), ErrInUse)
	}
	return nil
}
