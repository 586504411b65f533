package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// A lock (or rwlock) owner writes a fresh key under a queue prefix and holds
// once no blocking key created before its own is left. The key and the look
// for the blocker just ahead are one transaction, so an uncontended
// acquisition is one round trip. A waiting caller is a parked reply: the
// loop has a session helper watch only the blocker just ahead (so a handoff
// sends one watch event to one waiter however many wait) and, when it is
// deleted, confirm off the loop that the waiter's own key still exists and
// nobody is left ahead; the revision of that read is the token.

// queue names where an owner's key goes and what it waits for.
type queue struct {
	mode     rwlock.Mode // carried into the grant (rwlocks)
	keys     string      // prefix of the owner's key
	blockers string      // prefix of the keys that block it
	value    string      // the key's value (WithValue, Campaign)
}

// waiter is a key waiting for its turn, and its parked caller. Loop only.
type waiter struct {
	key      string
	created  int64
	mode     rwlock.Mode
	value    string    // elections: the candidate's value
	blockers string    // locks: prefix of the keys that block it
	waited   bool      // someone was ahead when it was written
	start    time.Time // when its acquisition began
	reply    actor.Reply[driver.Hold]
	// Locks: the blocker just ahead, and the end of the helper watching
	// it (semaphores) or looking past it (locks).
	ahead     *mvccpb.KeyValue
	stopWatch context.CancelFunc
	// Locks: w waits on the ahead mirror (following), which had shown
	// nothing new about the blocker up to revision checked; a look is under
	// way (looking).
	following bool
	looking   bool
	checked   int64
}

// acquire makes this owner hold the lock in q, or fails leaving no key.
func (svc *service) acquire(ctx context.Context, q queue, try bool) (driver.Hold, error) {
	if err := svc.Enter(ctx, try); err != nil {
		return driver.Hold{}, err
	}
	g, err := svc.enqueue(ctx, q, try)
	if err != nil {
		svc.Leave() // a recorded grant's end frees sem, on the loop
	}
	return g, err
}

// enqueue writes the key and waits for the grant.
func (svc *service) enqueue(ctx context.Context, q queue, try bool) (driver.Hold, error) {
	var conds []clientv3.Cmp
	var ahead func(...clientv3.OpOption) clientv3.Op
	if try {
		conds = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(q.blockers), "=", 0).WithPrefix()}
	} else {
		// The blocker created last before this key, if any: the one to
		// wait for. The Get runs before the Put, so it never sees this key.
		// Keys only: etcd serves it from its index, without reading the
		// queue's values inside the transaction's apply, which every
		// write waits for.
		ahead = func(opts ...clientv3.OpOption) clientv3.Op {
			return clientv3.OpGet(q.blockers, append(append(clientv3.WithLastCreate(), clientv3.WithKeysOnly()), opts...)...)
		}
	}
	w, read, err := svc.create(ctx, q.keys, q.value, conds, ahead)
	if err != nil {
		return driver.Hold{}, err
	}
	if w == nil {
		return svc.tryPastNested(ctx, q)
	}
	w.mode, w.blockers = q.mode, q.blockers
	var pred *mvccpb.KeyValue
	if kvs := read.GetResponseRange().GetKvs(); len(kvs) > 0 {
		pred = kvs[0]
	}
	return svc.park(ctx, w, func(r actor.Reply[driver.Hold]) { svc.enqueued(w, pred, r) })
}

// tryPastNested settles a Try that found some key under q's blockers: if
// every one is a nested name's (see ours), it writes the key, looks past
// them and holds if nobody of its own layout is ahead; otherwise, or if
// someone of the layout got ahead meanwhile, the lock is taken and no key
// is left. Its reads are made in attempts (see inAttempts), so that a
// member that stopped answering holds no Try until its caller's deadline.
func (svc *service) tryPastNested(ctx context.Context, q queue) (driver.Hold, error) {
	taken := fmt.Errorf("%s: %w", svc.name, svc.spec.errTaken)
	// Not keys only: etcd's keys-only ranges leave out the lease, which
	// ours reads.
	resp, err := svc.s.get(ctx, q.blockers, clientv3.WithPrefix())
	if err != nil {
		return driver.Hold{}, svc.callErr(ctx, fmt.Errorf("%s: %w", svc.name, err))
	}
	for _, kv := range resp.Kvs {
		if svc.ours(kv) {
			return driver.Hold{}, taken
		}
	}
	w, _, err := svc.create(ctx, q.keys, q.value, nil, nil)
	if err != nil {
		return driver.Hold{}, err
	}
	w.mode, w.blockers = q.mode, q.blockers
	// In attempts: the helpers' looks make theirs (see lookPast).
	var pred *mvccpb.KeyValue
	var rev int64
	_, _, err = inAttempts(svc.s, ctx, func(actx context.Context) (struct{}, error) {
		var err error
		pred, rev, err = svc.lookPastNested(actx, w)
		return struct{}{}, err
	})
	if err == nil && pred != nil {
		err = taken
	}
	if err != nil {
		_ = svc.s.deleteKey(w.key, w.created)
		return driver.Hold{}, svc.callErr(ctx, err)
	}
	// It holds at rev, the look's revision: at its own creation a key of
	// its layout may still have been ahead.
	return svc.park(ctx, w, func(r actor.Reply[driver.Hold]) {
		if svc.parkable(w, r) {
			w.reply, svc.waiter = r, w
			svc.holds(w, rev)
		}
	})
}

// create writes a new key under keys with value, if conds hold, in one
// transaction whose first operation, if first is set, is the read first()
// running before the put. It returns the waiter for the key and the read's
// response; a nil waiter and nil error mean conds failed.
//
// A key of the same name left behind earlier (a reply lost, a cleanup that
// failed) is deleted first, never overwritten: overwriting would keep its
// old CreateRevision. A request that failed on its own while the caller's
// ctx lives (a broken connection, a member that did not answer within an
// attempt's bound, etcd's own request timeout) may still have landed, or
// land later: the same transaction is sent again under the same name, with a
// backoff growing to a second, until the caller's ctx ends. The name's
// compare makes the repeat harmless: if an earlier attempt landed, the
// repeat finds the key and adopts it (its create revision is above every
// key this service wrote before: no leftover), reading first() at the
// revision just before it, as the landed transaction did. A timeout thus
// adds no write but the repeat. The name is never used again, and once the
// key is deleted it is deleted once more later (see markUnsure), in case an
// attempt still in flight lands after it. Past the caller's ctx, or on
// another error, the name is retired and the key deleted whether or not it
// was written.
func (svc *service) create(ctx context.Context, keys, value string, conds []clientv3.Cmp, first func(...clientv3.OpOption) clientv3.Op) (*waiter, *etcdserverpb.ResponseOp, error) {
	start := time.Now()
	backoff := ctxtime.NewBackoff(50*time.Millisecond, time.Second)
	key := svc.nextKey(keys)
	unsure := false  // an attempt failed: it may have landed, or land later
	cleared := false // a leftover of the name was deleted
	// retire gives the name up for good: every attempt of it is settled by
	// deleting the key, now if the caller is still here, and again later.
	retire := func(now bool) {
		svc.retired += 2
		if now {
			svc.s.deleteUnknown(key)
		} else {
			svc.s.goHelper(func(context.Context) { svc.s.deleteUnknown(key) })
		}
	}
	for {
		free := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		put := clientv3.OpPut(key, value, clientv3.WithLease(svc.s.lease))
		then := []clientv3.Op{put}
		if first != nil {
			then = []clientv3.Op{first(), put}
		}
		o, settled := svc.commitKey(ctx, key, func(tctx context.Context) (*clientv3.TxnResponse, error) {
			return svc.s.cli.Txn(tctx).If(append([]clientv3.Cmp{free}, conds...)...).Then(then...).
				Else(clientv3.OpGet(key)).Commit()
		})
		if !settled {
			// A helper settles this attempt's key; an earlier one may
			// still land.
			if unsure {
				retire(false)
			} else {
				svc.retired += 2
			}
			return nil, nil, ctx.Err()
		}
		resp, err := o.resp, o.err
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Nothing was written: the transaction failed as a whole. The
			// session is lost; say so now rather than at its deadline.
			svc.s.post(svc.s.leaseGone)
			<-svc.s.done
			return nil, nil, svc.callErr(ctx, fmt.Errorf("%s: %w", svc.name, err))
		}
		if err != nil {
			if ctx.Err() == nil && svc.s.ctx.Err() == nil && retriable(err) {
				// The client's balancer takes the next member; the caller's
				// ctx and the session's life bound the tries.
				unsure = true
				backoff.Wait(ctx)
				continue
			}
			retire(true)
			return nil, nil, svc.callErr(ctx, fmt.Errorf("%s: %w", svc.name, err))
		}
		if resp.Succeeded {
			w := svc.written(key, resp.Header.Revision, value, start, unsure)
			if first == nil {
				return w, nil, nil
			}
			return w, resp.Responses[0], nil
		}
		old := resp.Responses[0].GetResponseRange().Kvs
		if len(old) == 0 {
			if unsure {
				retire(true) // an earlier attempt may still land
			}
			return nil, nil, nil // conds failed
		}
		if unsure && old[0].CreateRevision > svc.lastCreated && old[0].Lease == int64(svc.s.lease) {
			// An earlier attempt of this call landed.
			w := svc.written(key, old[0].CreateRevision, value, start, true)
			if first == nil {
				return w, nil, nil
			}
			read, err := svc.readBefore(ctx, w.created, first)
			if err == nil {
				return w, read, nil
			}
			_ = svc.s.deleteKey(key, w.created)
			if !errors.Is(err, rpctypes.ErrCompacted) {
				return nil, nil, svc.callErr(ctx, fmt.Errorf("%s: %w", svc.name, err))
			}
			// etcd no longer has the revision the write read: write
			// again, under a new name.
			key, unsure, cleared = svc.nextKey(keys), false, false
			continue
		}
		if cleared {
			return nil, nil, fmt.Errorf("%s: key %s keeps existing: %w", svc.name, key, primitives.ErrLost)
		}
		if err := svc.s.deleteOnce(ctx, key, old[0].CreateRevision); err != nil {
			if unsure {
				retire(true)
			}
			return nil, nil, svc.callErr(ctx, fmt.Errorf("%s: delete leftover key %s: %w", svc.name, key, err))
		}
		cleared = true // write the same name again, now that it is free
	}
}

// written records the key this service wrote at created and returns its
// waiter. An unsure key (an attempt of its write failed) retires its name
// and is deleted once more after its deletion. The caller is in sem.
func (svc *service) written(key string, created int64, value string, start time.Time, unsure bool) *waiter {
	svc.lastCreated = max(svc.lastCreated, created)
	if unsure {
		svc.retired += 2
		svc.s.markUnsure(key)
	}
	return &waiter{key: key, created: created, value: value, start: start}
}

// readBefore reads first() as of the revision just before created, which is
// what the transaction that wrote the key at created read before its put.
func (svc *service) readBefore(ctx context.Context, created int64, first func(...clientv3.OpOption) clientv3.Op) (*etcdserverpb.ResponseOp, error) {
	resp, _, err := svc.s.txn(ctx, nil, []clientv3.Op{first(clientv3.WithRev(created - 1))})
	if err != nil {
		return nil, err
	}
	return resp.Responses[0], nil
}

// txnOutcome is a transaction's response or error.
type txnOutcome struct {
	resp *clientv3.TxnResponse
	err  error
}

// commitKey commits txn, which may write key, on a context that the end of
// the caller's ctx does not cancel (it is one attempt, bounded as every
// attempt is, and by the session's life): the caller's deadline never reaches etcd, whose
// own timeout could otherwise answer first, and the outcome is known. If
// ctx ends first, commitKey returns false once a session helper has settled
// the outcome (or after settleGrace, leaving the helper to it): a key the
// transaction wrote is deleted, and so is the key of a transaction whose
// outcome stays unknown.
func (svc *service) commitKey(ctx context.Context, key string, txn func(context.Context) (*clientv3.TxnResponse, error)) (txnOutcome, bool) {
	out := make(chan txnOutcome)
	left, settled := make(chan struct{}), make(chan struct{})
	started := svc.s.goHelper(func(sctx context.Context) {
		base, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(sctx, cancel)()
		tctx, done := svc.s.attempt(base)
		resp, err := txn(tctx)
		done(err)
		select {
		case out <- txnOutcome{resp, err}:
		case <-left:
			switch {
			case err != nil:
				svc.s.deleteUnknown(key)
			case resp.Succeeded:
				_ = svc.s.deleteKey(key, resp.Header.Revision)
			}
			close(settled)
		}
	})
	if !started {
		return txnOutcome{err: fmt.Errorf("session closing: %w", primitives.ErrClosed)}, true
	}
	select {
	case o := <-out:
		return o, true
	case <-ctx.Done():
		close(left)
		// A write settles within a round trip while etcd answers: wait that
		// long, so that a caller who gave up finds no key of its own left
		// when it returns; past settleGrace (etcd slow or unreachable) the
		// helper settles it later.
		t := time.NewTimer(settleGrace)
		defer t.Stop()
		select {
		case <-settled:
		case <-t.C:
		}
		return txnOutcome{}, false
	}
}

// settleGrace bounds how long a caller whose ctx ended waits for its key's
// write to settle before it returns.
const settleGrace = 250 * time.Millisecond

// park hands w to the loop with post and waits for the grant. A caller that
// fails (its ctx ended, the key was lost, the service or session ended)
// withdraws w and deletes its key before returning.
func (svc *service) park(ctx context.Context, w *waiter, post func(actor.Reply[driver.Hold])) (driver.Hold, error) {
	g, err := call(ctx, svc.s, post)
	if err != nil {
		svc.s.post(func() { svc.withdraw(w) })
		_ = svc.s.deleteKey(w.key, w.created)
		return driver.Hold{}, svc.callErr(ctx, err)
	}
	return g, nil
}

// parkable reports whether w's caller can be parked; if not (the service
// ended, or w's key is already gone) it answers r. Loop only.
func (svc *service) parkable(w *waiter, r actor.Reply[driver.Hold]) bool {
	switch {
	case svc.Ended():
		r.Answer(driver.Hold{}, svc.Err())
		return false
	case svc.gone(w.key, w.created):
		r.Answer(driver.Hold{}, fmt.Errorf("%s: key %s deleted before it was granted: %w", svc.name, w.key, primitives.ErrLost))
		return false
	}
	return true
}

// enqueued parks the caller of a lock's new key until it holds. Loop only.
func (svc *service) enqueued(w *waiter, pred *mvccpb.KeyValue, r actor.Reply[driver.Hold]) {
	if !svc.parkable(w, r) {
		return
	}
	w.reply = r
	w.waited = pred != nil
	svc.waiter = w
	svc.seen = max(svc.seen, w.created)
	svc.watchOwnSoon()
	switch {
	case pred == nil:
		// At its creation the key exists and no earlier one does.
		svc.holds(w, w.created)
	case !svc.surelyOurs(pred):
		svc.lookPast(w, pred)
	default:
		svc.watchAhead(w, pred, w.created)
	}
}

// lookPast has a session helper look past pred, a nested name's key just
// ahead of w, for the key of w's own layout ahead of it, if any. Should the
// look fail, w watches pred instead: its deletion brings another look.
// Loop only.
func (svc *service) lookPast(w *waiter, pred *mvccpb.KeyValue) {
	w.ahead = pred
	svc.s.goHelper(func(ctx context.Context) {
		ctx, done := svc.s.attempt(ctx)
		next, rev, err := svc.lookPastNested(ctx, w)
		done(err)
		svc.s.post(func() {
			if err != nil && !lostErr(err) {
				if svc.waiter == w && w.ahead == pred {
					svc.watchAhead(w, pred, w.created)
				}
				return
			}
			svc.looked(w, pred, next, rev, err)
		})
	})
}

// watchAhead makes w wait behind pred, the blocker just ahead of it, which
// a read at revision seen showed to exist: the service follows the
// deletions of the keys of pred's session under the prefix (its ahead
// mirror, see followAhead) and, whenever one comes after seen, a session
// helper looks again (checkAhead). Loop only.
func (svc *service) watchAhead(w *waiter, pred *mvccpb.KeyValue, seen int64) {
	svc.stopLook(w)
	w.ahead, w.checked, w.following = pred, seen, true
	if stem := w.key[:strings.LastIndexByte(w.key, '.')+1]; strings.HasPrefix(string(pred.Key), stem) {
		// A key of this very service ahead of its own waiter: the write of
		// an earlier attempt whose reply was lost, landed after its name
		// was given up (a service holds one key at a time). Nobody else
		// deletes it while the session lives; its deletion wakes w.
		key, rev := string(pred.Key), pred.CreateRevision
		svc.s.goHelper(func(context.Context) { _ = svc.s.deleteKey(key, rev) })
	}
	svc.followAhead(svc.aheadPrefix(pred))
	svc.checkAhead(w)
}

// followAhead makes the blind mirror of prefix (see mirror: the deletions
// under it, and no read of its keys, since w knows what it waits behind) the
// service's ahead mirror, opening it unless it already is. The mirror outlives the
// wait: with steady contention the key ahead of a service's next key is
// most often the next key of the same session (the queue turns in the same
// order), and a kept mirror costs that wait no request at all; it is
// dropped when it brings news while the service waits for nothing. Loop
// only.
func (svc *service) followAhead(prefix string) {
	svc.aheadIdle = 0
	if svc.aheadMirror != nil && svc.aheadMirror.prefix == prefix {
		return
	}
	svc.dropAhead()
	svc.aheadMirror = svc.s.openMirror(mirrorID{prefix: prefix, blind: true}, svc)
}

// dropAhead closes the ahead mirror. Loop only.
func (svc *service) dropAhead() {
	m := svc.aheadMirror
	if m == nil {
		return
	}
	svc.aheadMirror = nil
	svc.s.closeMirror(m, svc)
}

// aheadChanged is told of each change of the ahead mirror. Loop only.
func (svc *service) aheadChanged() {
	if w := svc.waiter; w != nil && w.following {
		svc.checkAhead(w)
		return
	}
	// News nobody waits for: one may come between a release and the next
	// wait (the key the next wait will be behind, deleted before it
	// starts), a second says the mirror serves nothing.
	if svc.aheadIdle++; svc.aheadIdle >= 2 {
		svc.dropAhead()
	}
}

// aheadPrefix returns the prefix of the keys whose deletions a waiter
// behind kv follows: those of kv's session in kv's queue ("<queue><lease>-")
// for locks, whose owners queue again and again in the same order; kv's
// own key (and any key it is a prefix of, rare, whose deletion only costs
// a look) for elections, whose candidates wait long, each behind another,
// so that a term's end reaches the one next in line alone; and kv's own key
// if it is not of the layout.
func (svc *service) aheadPrefix(kv *mvccpb.KeyValue) string {
	key := string(kv.Key)
	if svc.spec.election {
		return key
	}
	if i := strings.IndexByte(key[min(len(svc.prefix), len(key)):], '-'); i >= 0 && strings.HasPrefix(key, svc.prefix) {
		return key[:len(svc.prefix)+i+1]
	}
	return key
}

// checkAhead has a session helper look past w's blocker, unless a look is
// under way, if the ahead mirror shows a deletion after the revision at
// which w last saw the blocker: the blocker's, or another key's of its
// session (then the look finds the blocker still there, and w waits on).
// A look that fails on its own is repeated. Loop only.
func (svc *service) checkAhead(w *waiter) {
	m := svc.aheadMirror
	if svc.waiter != w || !w.following || w.looking || m == nil || !m.ready || m.rev <= w.checked {
		return
	}
	pred, after := w.ahead, m.rev
	w.looking = true
	ctx, cancel := context.WithCancel(svc.s.ctx)
	w.stopWatch = cancel
	svc.s.goHelper(func(context.Context) {
		for ctx.Err() == nil {
			rctx, done := svc.s.attempt(ctx)
			next, rev, err := svc.look(rctx, w, after, pred)
			done(err)
			if err == nil || lostErr(err) {
				svc.s.post(func() { svc.aheadLooked(w, pred, next, after, rev, err) })
				return
			}
			ctxtime.Sleep(ctx, lookRetry)
		}
	})
}

// lookRetry is the pause before a failed look is repeated.
const lookRetry = 100 * time.Millisecond

// aheadLooked settles a look of checkAhead: after is the ahead mirror's
// revision when it began, rev the look's. Loop only.
func (svc *service) aheadLooked(w *waiter, pred, next *mvccpb.KeyValue, after, rev int64, err error) {
	if svc.waiter != w || w.ahead != pred || !w.looking {
		return
	}
	svc.stopLook(w)
	if err == nil && next != nil && sameKey(next, pred) {
		// pred is still there: a deletion of another key of its session.
		w.checked = max(after, rev)
		svc.checkAhead(w) // news that came during the look
		return
	}
	svc.looked(w, pred, next, rev, err)
}

// stopLook ends w's look helper, if any. Loop only.
func (svc *service) stopLook(w *waiter) {
	if w.stopWatch != nil {
		w.stopWatch()
		w.stopWatch = nil
	}
	w.looking = false
}

// surelyOurs reports whether kv, read keys only, is known by its name to
// be of the service's layout; if not (a nested name's key, a key of
// another layout), a look with leases (lookPastNested) settles what is
// ahead.
func (svc *service) surelyOurs(kv *mvccpb.KeyValue) bool {
	isOurs, sure := svc.oursByName(kv)
	return isOurs && sure
}

func sameKey(a, b *mvccpb.KeyValue) bool {
	return string(a.Key) == string(b.Key) && a.CreateRevision == b.CreateRevision
}

// look returns the blocker now just ahead of w's key (nil: none) and the
// revision of the read, in a transaction that also confirms w's key still
// exists. The read reflects revision after (and w's key's creation) or a
// later one. Given still, a blocker w waited behind, it reads the queue
// only if still is gone: if still is there, it is the answer, and two keys
// compared cost etcd much less than a read of the whole queue. Either way,
// one transaction.
//
// It is first served by the member the client picks, from its own state,
// without a consensus round (a serializable read): whatever that state
// shows is a committed revision's, so a key there exists and none before it
// does at that revision, which is all a token needs. A member that has not
// yet applied after would show the deleted blocker still there (the waiter
// would wait for an event already seen), or not yet w's key; then the read
// is repeated linearizable. Helper goroutine only.
func (svc *service) look(ctx context.Context, w *waiter, after int64, still *mvccpb.KeyValue) (*mvccpb.KeyValue, int64, error) {
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.created)
	ahead := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(w.created-1), clientv3.WithKeysOnly())
	read := func(opts ...clientv3.OpOption) (*clientv3.TxnResponse, error) {
		queue := clientv3.OpGet(w.blockers, append(ahead, opts...)...)
		if still == nil {
			return svc.s.cli.Txn(ctx).If(mine).Then(queue).Commit()
		}
		// Then: both keys are there. Else: is w's key, and the queue.
		// Only ranges in both branches, so that a serializable read stays
		// one.
		there := clientv3.Compare(clientv3.CreateRevision(string(still.Key)), "=", still.CreateRevision)
		count := clientv3.OpGet(w.key, append(opts, clientv3.WithCountOnly())...)
		return svc.s.cli.Txn(ctx).If(mine, there).Then(count).Else(count, queue).Commit()
	}
	resp, err := read(clientv3.WithSerializable())
	if err == nil && resp.Header.Revision < max(after, w.created) {
		resp, err = read()
	}
	if err != nil {
		return nil, 0, err
	}
	// Without still, a failed If (w's key gone) runs no branch: the
	// response has no ranges at all, and that is the answer.
	gone := fmt.Errorf("%s: waiting key %s deleted by another client: %w", svc.name, w.key, primitives.ErrLost)
	var queue *etcdserverpb.ResponseOp
	switch {
	case still == nil && resp.Succeeded:
		queue = resp.Responses[0]
	case still == nil:
		return nil, 0, gone
	case resp.Succeeded:
		return still, resp.Header.Revision, nil
	case resp.Responses[0].GetResponseRange().Count > 0:
		queue = resp.Responses[1]
	default:
		return nil, 0, gone
	}
	if kvs := queue.GetResponseRange().Kvs; len(kvs) > 0 {
		if !svc.surelyOurs(kvs[0]) {
			return svc.lookPastNested(ctx, w)
		}
		return kvs[0], resp.Header.Revision, nil
	}
	return nil, resp.Header.Revision, nil
}

// lookPastNested is look when keys of nested names may lie ahead of w: it
// reads every key ahead (linearizably; with values, since a keys-only
// range leaves out the lease that ours reads) and returns the one of w's layout
// created last, if any, in a transaction that confirms w's key still
// exists: one request, which its callers make in an attempt or attempts.
// Nested names are rare; the whole read is paid only where they are.
func (svc *service) lookPastNested(ctx context.Context, w *waiter) (*mvccpb.KeyValue, int64, error) {
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.created)
	resp, err := svc.s.cli.Txn(ctx).If(mine).Then(clientv3.OpGet(w.blockers, clientv3.WithPrefix(),
		clientv3.WithMaxCreateRev(w.created-1), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))).Commit()
	if err != nil {
		return nil, 0, err
	}
	if !resp.Succeeded {
		return nil, 0, fmt.Errorf("%s: waiting key %s deleted by another client: %w", svc.name, w.key, primitives.ErrLost)
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if svc.ours(kv) {
			return kv, resp.Header.Revision, nil
		}
	}
	return nil, resp.Header.Revision, nil
}

// looked settles a look of w made while pred was ahead. Loop only.
func (svc *service) looked(w *waiter, pred, next *mvccpb.KeyValue, rev int64, err error) {
	if svc.waiter != w || w.ahead != pred {
		return // a look of an earlier watch, or the waiter is gone
	}
	switch {
	case err != nil:
		svc.stopWaiter(err)
	case next == nil:
		svc.holds(w, rev)
	case !sameKey(next, pred) || !w.following:
		// pred is gone and someone before it is still there; or pred, a
		// key lookPast was not sure of, is of w's layout after all.
		svc.watchAhead(w, next, rev)
	}
}

// holds: w's key holds at rev. The grant is born whole: with its token at
// rev, or with a token the spec issues off the loop first. Loop only.
func (svc *service) holds(w *waiter, rev int64) {
	svc.stopLook(w)
	w.ahead, w.following = nil, false
	if svc.spec.election {
		// A term's token is its key's CreateRevision; the key it waited
		// behind is gone, and a leader waits behind no other.
		rev = w.created
		svc.dropAhead()
	}
	g := driver.Hold{Key: w.key, Created: w.created, Token: fencing.Token(rev), Mode: w.mode, Value: w.value, Waited: w.waited}
	if svc.spec.token == nil {
		svc.grantWaiter(w, g)
		return
	}
	ctx := w.reply.Context()
	svc.s.goHelper(func(sctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(sctx, cancel)()
		tok, err := svc.spec.token(ctx, svc, g)
		svc.s.post(func() { svc.tokenIssued(w, tok, err) })
	})
}

// tokenIssued grants w with the token a helper issued for it. Loop only.
func (svc *service) tokenIssued(w *waiter, tok int64, err error) {
	if svc.waiter != w {
		return
	}
	if err != nil {
		svc.stopWaiter(fmt.Errorf("%s: fencing token: %w", svc.name, err))
		return
	}
	svc.grantWaiter(w, driver.Hold{Key: w.key, Created: w.created, Token: fencing.Token(tok), Mode: w.mode, Value: w.value, Waited: w.waited})
}

// grantWaiter turns the waiter into the service's grant. Loop only.
func (svc *service) grantWaiter(w *waiter, g driver.Hold) {
	svc.waiter = nil
	svc.recordGrant(g, w)
}

// withdraw forgets w, if it still waits: its caller gave up and deletes its
// key. Loop only.
func (svc *service) withdraw(w *waiter) {
	if svc.waiter == w {
		svc.waiter = nil
		svc.stopLook(w)
	}
}

// stopWaiter fails the waiting caller, if any, with err and returns its key.
// Loop only.
func (svc *service) stopWaiter(err error) []keyRev {
	w := svc.waiter
	if w == nil {
		return nil
	}
	svc.withdraw(w)
	w.reply.Answer(driver.Hold{}, err)
	return []keyRev{{w.key, w.created}}
}

func lostErr(err error) bool { return errors.Is(err, primitives.ErrLost) }
