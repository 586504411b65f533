package etcdio

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/internal/reach"
	"github.com/ahrtr/disco/primitives/driver"
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
//     CreateRevision, on the holder's lease. The claim also writes i into the
//     holder's queue key. A slot is taken while its slot key exists or a live
//     queue key names it, so exclusion survives the deletion of either key.
//     A holder claims the lowest free slot with a compare-and-swap on the
//     slot key's ModRevision, so no slot is ever owned by two holders at
//     once. Its fencing token is the revision of that claim: strictly
//     increasing per name, and so per slot.
//
// A release deletes the queue key and, in the same transaction, the slot key
// if the claim is still the holder's. A holder watches its two keys (see
// watchHold): if someone else deletes one of them while its lease lives, it
// is told Lost as soon as its watch delivers the deletion and a lease check
// confirms the lease (normally milliseconds; at most follow's check of a
// silent watch, 3 s, plus one attempt's bound), and then deletes the other
// key, which frees the slot for the next claimant, with a higher token. A
// lost lease takes both keys. An Acquire that ends without a grant deletes
// its queue key and any claim it made; Close on a shared session deletes the
// claim of the hold it ends.
//
// Older disco: the keys and their values are the same, and an older disco
// reads slot keys as it always did, so a mix of old and new on one name
// excludes as the old one alone does. An older disco left claims behind (a
// Close on a shared session, an Acquire given up mid-claim) that name a
// queue key no longer there; a claimant with no other free slot takes such a
// claim over once it has seen it for one TTL of its lease: Acquire waits
// for that, TryAcquire fails with ErrNoPermit until then (see
// noteLeftovers).
//
// An uncontended Acquire is two writes: the queue key (with a read of the
// queue and the slots in the same transaction) and the slot's claim.
//
// Who watches what, so that a release wakes only the waiter it admits:
//
//   - The waiters form a chain, as a lock's do (queue.go). A waiter with
//     more than N keys ahead watches only the key just ahead of it, its
//     predecessor, for its claim (a put) or its deletion (watchPred); at
//     either it reads the queue and claims, becomes the head, or watches
//     its new predecessor.
//   - The head, the one waiter with exactly N keys ahead (all holding or
//     claiming), alone watches the queue's deletions and counts down the
//     keys ahead (watchQueue). On its turn it claims the slot the deleted
//     key names, without a read; its claim, a put of its queue key, is the
//     event that makes its successor the head.
//   - A holder watches its own two keys, each alone (watchHold), and ends
//     both watches before its release deletes them; its session's watch of
//     its own keys sees its queue key go.
//
// Liveness holds whatever key goes: every waiter's key is watched by its
// successor, so a waiter deleted or given up anywhere in the chain wakes the
// one behind it, which links to the key now ahead; and the keys ahead of the
// head, the only ones no waiter watches singly, are the ones its watch of
// the queue counts. (Watching the key N ahead instead would lose a waiter
// whose N-th key ahead outlives a key between.) A waiter in the chain is
// admitted no earlier than its predecessor claims or goes: in queue order.
//
// A handoff costs three watch events, however many wait: the releasing
// holder's session sees its queue key go, the head sees it too, and the
// head's claim reaches its successor; plus the successor's read and, as it
// becomes the head, one new watch. (A holder's watch whose end reaches etcd
// only after the release's delete, rare with a disk under etcd, sees the
// delete too: one event more.) Only what each owner watches changed from
// the earlier disco, not what it writes: an older disco's waiters, which
// watch the whole queue, count the same keys, and its claims are the puts
// a newer waiter behind it waits for.
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

	mu     sync.Mutex
	held   claimed // the slot of the service's latest claim
	snap   snapshot
	claims claimState
	// leftovers: the claims naming gone queue keys that the latest claim
	// saw, and when each may be taken over (see noteLeftovers).
	leftovers map[leftover]time.Time
}

// PermitsSuffix is appended to a semaphore's prefix to name the key that
// stores its number of permits.
const PermitsSuffix = ".permits"

// NewSemaphore returns a semaphore on prefix with n permits (1 <= n <=
// semaphore.MaxPermits: a semaphore's holders each read every slot key). The first user of a prefix records n beside it (prefix +
// PermitsSuffix); a later user with another n gets an error wrapping
// semaphore.ErrPermitMismatch, and nothing of its own is left in etcd.
// Without WithSession it runs its own session, closed by its Close.
//
// A hold is two keys, its queue key and its slot key (prefix/slot/<i>);
// either one keeps the slot from any other owner. If someone else deletes
// one of them while the holder's session lives, the holder is told Lost
// (Lost event, ErrNotHeld from Release) as soon as its watch of the keys
// sees the deletion, at most about 5 s later (a silent watch is found within
// 3 s, then one lease check of at most 2 s), and only then is the slot free
// for the next owner, with a higher token. Acquire returns ctx.Err() once
// ctx ends or its deadline passes, and leaves nothing behind in etcd.
func NewSemaphore(cli *clientv3.Client, prefix string, n int, opts ...Option) (semaphore.Service, error) {
	fail := func(err error) error { return fmt.Errorf("etcdio: new semaphore %s: %w", quote.Name(prefix), err) }
	o, err := checkArgs(cli, prefix, opts)
	if err == nil {
		err = checkLockValue("semaphore", o) // before the record of n is written
	}
	if err != nil {
		return nil, fail(err)
	}
	if n < 1 || n > semaphore.MaxPermits {
		return nil, fail(fmt.Errorf("%d permits, want 1 to %d: %w", n, semaphore.MaxPermits, ErrInvalidArgument))
	}
	st := &semState{n: n, nameArg: prefix, cfgKey: prefix + PermitsSuffix, queueDir: prefix + "/q/", slotDir: prefix + "/slot/"}
	ctx, cancel := constructing(cli, o)
	created, err := st.agree(ctx, cli)
	cancel()
	if err != nil {
		return nil, fail(err)
	}
	sp := &spec{kind: "semaphore", errTaken: semaphore.ErrNoPermit, errNotHeld: semaphore.ErrNotHeld,
		ownQueues: []string{"q/"}, token: st.claim}
	svc, err := newService(sp, cli, prefix, opts)
	if err != nil {
		if created {
			// Undo the record of n, unless someone uses the name meanwhile.
			ctx, cancel := constructing(cli, o)
			_ = retireSemaphore(ctx, cli, prefix)
			cancel()
		}
		return nil, err
	}
	return semService{svc, st}, nil
}

// agree records n for the name if nobody has, and checks it otherwise. It
// reports whether it wrote the record.
func (st *semState) agree(ctx context.Context, cli *clientv3.Client) (bool, error) {
	want := strconv.Itoa(st.n)
	sent := time.Now()
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(st.cfgKey), "=", 0)).
		Then(clientv3.OpPut(st.cfgKey, want)).Else(clientv3.OpGet(st.cfgKey)).Commit()
	if err != nil {
		return false, fmt.Errorf("record %d permits: %w", st.n, reach.Failed(ctx, "etcd", cli.Endpoints(), sent, "", err))
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

func (m semService) grant(g driver.Hold, err error) (semaphore.Grant, error) {
	if err != nil {
		return semaphore.Grant{}, err
	}
	return semaphore.Grant{FencingToken: g.Token, Key: g.Key, LeaseID: g.LeaseID, TTL: m.s.ttl,
		Name: m.nameArg, Slot: m.slotOf(g.Created), Created: g.Created}, nil
}

// Release deletes g's queue key and, in the same transaction, its slot key
// if the slot is still g's, only if the key is still g's, so a late retry
// never frees a newer hold. If the transaction finds the slot key deleted
// by someone else (the queue key still there), the hold was lost: it ends
// Lost, as when its watch sees the deletion first, and Release returns an
// error wrapping semaphore.ErrNotHeld. A hold whose queue key was seen gone already
// (deleted by someone else, or with the lease) ends as a lock's does (see
// settleVanished): if the session's lease went, the session is
// lost and Release returns an error wrapping primitives.ErrLost; else the
// hold ends Lost, its slot key is deleted, and Release returns an error
// wrapping semaphore.ErrNotHeld; if etcd does not say which before ctx
// ends, Release returns ctx's error and the hold ends when the session
// learns which.
func (m semService) Release(ctx context.Context, g semaphore.Grant) error {
	at := driver.CreatedAt(g.Created)
	match := func(h driver.Hold) bool { return at(h) && m.slotOf(h.Created) == g.Slot }
	cur, vanished, err := m.beginReleaseSeen(ctx, match)
	if err != nil {
		return err
	}
	slotKey := m.slotDir + strconv.Itoa(g.Slot)
	h := slotHold{key: cur.Key, created: cur.Created, slotKey: slotKey, token: int64(cur.Token)}
	// The release's own deletions need not reach the hold's watches: a
	// deletion by someone else meanwhile changes nothing, since the hold
	// ends either way (partLost leaves a hold being released alone).
	watched := m.stopWatchOf(cur.Created)
	if vanished {
		err = m.settleVanished(ctx, cur)
	} else {
		freeSlot := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(slotKey), "=", h.token)},
			[]clientv3.Op{clientv3.OpDelete(slotKey)}, nil)
		err = m.deleteHeld(ctx, cur, func(resp *clientv3.TxnResponse) string {
			if resp.Responses[1].GetResponseTxn().Succeeded {
				return ""
			}
			return "slot key " + slotKey // deleted by someone else: the queue key was there
		}, freeSlot)
	}
	switch now, held := m.Current(); {
	case held && now.Created == cur.Created:
		// The release failed and the hold stands: watch it again (the
		// watches' first read catches up with what happened meanwhile).
		if watched {
			m.watchHold(m.service, h)
		}
	case vanished && m.s.Err() == nil:
		// The hold ended Lost, its queue key deleted by someone else:
		// its slot key is left, which only this release deletes now
		// (the hold's watches ended as it began).
		m.dropHoldWithin(ctx, m.s, h)
	}
	return err
}

// RetireSemaphore deletes the record of the number of permits of the
// semaphore on prefix (prefix + PermitsSuffix), the one key a semaphore
// leaves in etcd after every holder is gone. Call it when the name is retired
// for good, or to change its number of permits while nobody uses it. It
// fails with an error wrapping ErrInUse, deleting nothing, while a holder or
// waiter of the semaphore exists. It also deletes slot claims left by holders
// that are gone (an older disco's Close on a shared session left its claim,
// named after a key that no longer exists, until the session's lease ended).
func RetireSemaphore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	fail := func(err error) error { return fmt.Errorf("etcdio: retire semaphore %s: %w", quote.Name(prefix), err) }
	if err := checkPrefix(prefix); err != nil {
		return fail(err)
	}
	if err := checkClient(cli); err != nil {
		return fail(err)
	}
	if ctx == nil {
		return fail(driver.ContextErr(ctx))
	}
	return retireSemaphore(ctx, cli, prefix)
}

func retireSemaphore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(prefix+"/q/"), "=", 0).WithPrefix()).
		Then(clientv3.OpDelete(prefix+PermitsSuffix), clientv3.OpDelete(prefix+"/slot/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("etcdio: retire semaphore %s: %w", quote.Name(prefix), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdio: retire semaphore %s: keys under it exist: %w", quote.Name(prefix), ErrInUse)
	}
	return nil
}
