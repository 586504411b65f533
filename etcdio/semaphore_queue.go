package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// acquireSem makes this owner hold a permit, or fails leaving no key. If
// ctx ends (or its deadline passes) first, it returns ctx.Err().
func (m semService) acquireSem(ctx context.Context, try bool) (driver.Hold, error) {
	if err := m.Enter(ctx, try); err != nil {
		return driver.Hold{}, err
	}
	g, err := m.enqueueSem(ctx, try)
	if err != nil {
		m.Leave() // a recorded grant's end frees sem, on the loop
		if e := ctxtime.Ended(ctx); e != nil {
			return driver.Hold{}, e
		}
	}
	return g, err
}

// enqueueSem writes the owner's queue key, if the name's record of N agrees,
// reading the queue and the slots in the same transaction, and waits for the
// grant. The read runs before the put: every key it finds is ahead. A write
// its caller gave up on is settled by create.
func (m semService) enqueueSem(ctx context.Context, try bool) (driver.Hold, error) {
	agrees := clientv3.Compare(clientv3.Value(m.cfgKey), "=", strconv.Itoa(m.n))
	w, read, err := m.create(ctx, m.queueDir, "", []clientv3.Cmp{agrees}, m.readOp)
	if err != nil {
		return driver.Hold{}, err
	}
	if w == nil {
		return driver.Hold{}, fmt.Errorf("%s: %s no longer says %d permits (changed or retired): %w",
			m.name, m.cfgKey, m.n, semaphore.ErrPermitMismatch)
	}
	sn := m.snapshotOf(w.created, w.created, read)
	count := len(sn.queue)
	if try && count >= m.n {
		_ = m.s.deleteKey(w.key, w.created)
		return driver.Hold{}, fmt.Errorf("%s: %d owners hold or wait for %d permits: %w", m.name, count, m.n, semaphore.ErrNoPermit)
	}
	if count < m.n {
		// The read ran before the put: add the key the put wrote.
		sn.queue = append(sn.queue, &mvccpb.KeyValue{Key: []byte(w.key), CreateRevision: w.created})
		m.keep(sn)
	}
	w.blockers = m.queueDir
	m.tries(w.created, try)
	pred := last(sn.queue, w.created)
	g, err := m.park(ctx, w, func(r actor.Reply[driver.Hold]) { m.semEnqueued(w, count, pred, r) })
	if err != nil {
		m.dropClaim(w)
	}
	return g, err
}

// semEnqueued parks the caller of a new queue key, with count keys ahead of
// it (pred the one created last), until it holds. Loop only.
func (m semService) semEnqueued(w *waiter, count int, pred *mvccpb.KeyValue, r actor.Reply[driver.Hold]) {
	svc := m.service
	if !svc.parkable(w, r) {
		return
	}
	w.reply = r
	w.waited = count >= m.n
	svc.waiter = w
	svc.watchOwnSoon()
	switch {
	case !w.waited:
		svc.holds(w, w.created) // the spec's token claims a slot
	case count == m.n:
		m.watchQueue(w)
	default:
		m.watchPred(w, pred)
	}
}

// watchPred has a session helper watch pred, the queue key just ahead of w
// while more than N keys are ahead: w is in the chain of waiters, each of
// which watches only its predecessor. pred's next change, its claim (a put:
// pred holds) or its deletion, brings a look at the queue (semLook): with
// fewer than N keys ahead w's claim starts, with N ahead w is the chain's
// head (watchQueue), with more it watches the key now just ahead. So a
// waiter receives one watch event each time its predecessor moves, and
// none for releases ahead. The look also runs once the watch is in place,
// in case pred moved before. Loop only.
func (m semService) watchPred(w *waiter, pred *mvccpb.KeyValue) {
	svc := m.service
	ctx := m.rewatch(w, pred)
	moved := false // a look's outcome was posted: the loop ends this watch
	// look reads the queue; with still (pred as w last read it), only if
	// pred changed since.
	look := func(rctx context.Context, still *mvccpb.KeyValue) error {
		if moved {
			return nil
		}
		sn, rev, err := m.semLookPast(rctx, w, still)
		if errors.Is(err, errUnchanged) {
			return nil // pred still waits: its move is still to come
		}
		if err != nil && !lostErr(err) {
			return err // transient: follow reopens the watch and looks again
		}
		var next *mvccpb.KeyValue
		if err == nil {
			next = last(sn.queue, w.created)
		}
		switch left := ahead(sn.queue, w.created); {
		case err != nil:
			svc.s.post(func() { m.semLooked(w, pred, rev, err) })
		case left < m.n:
			m.keep(sn)
			svc.s.post(func() { m.semLooked(w, pred, rev, nil) })
		case left == m.n:
			svc.s.post(func() { m.predMoved(w, pred, nil) })
		case sameKey(next, pred):
			return nil // pred still waits: its move is still to come
		default:
			svc.s.post(func() { m.predMoved(w, pred, next) })
		}
		moved = true
		return nil
	}
	svc.s.goHelper(func(context.Context) {
		svc.s.follow(ctx, follower{key: string(pred.Key), kind: svc.spec.kind,
			synced:  func(rctx context.Context, _ int64) error { return look(rctx, pred) },
			changed: func(rctx context.Context, _ []*clientv3.Event) error { return look(rctx, nil) },
		})
	})
}

// rewatch ends w's watch, if any, and returns the context of the next one,
// which follows pred (nil: the queue). Loop only.
func (m semService) rewatch(w *waiter, pred *mvccpb.KeyValue) context.Context {
	if w.stopWatch != nil {
		w.stopWatch()
	}
	w.ahead = pred
	ctx, cancel := context.WithCancel(m.s.ctx)
	w.stopWatch = cancel
	return ctx
}

// predMoved: w's predecessor pred moved, and next is now just ahead of w
// (nil: N keys are ahead, w is the chain's head). Loop only.
func (m semService) predMoved(w *waiter, pred, next *mvccpb.KeyValue) {
	if m.waiter != w || w.ahead != pred || w.stopWatch == nil {
		return // a look of an earlier watch, or the waiter is gone
	}
	if next == nil {
		m.watchQueue(w)
		return
	}
	m.watchPred(w, next)
}

// slotNamed returns the slot a queue key names (its holder's claim), or -1.
func (st *semState) slotNamed(kv *mvccpb.KeyValue) int {
	if slot, err := strconv.Atoi(string(kv.Value)); err == nil && slot >= 0 && slot < st.n {
		return slot
	}
	return -1
}

// last returns the key of queue created last before created, or nil.
func last(queue []*mvccpb.KeyValue, created int64) *mvccpb.KeyValue {
	var kv *mvccpb.KeyValue
	for _, k := range queue {
		if k.CreateRevision < created && (kv == nil || k.CreateRevision > kv.CreateRevision) {
			kv = k
		}
	}
	return kv
}

// watchQueue has a session helper watch the queue's deletions (with the
// deleted keys' previous values) for w, the head of the chain of waiters
// (N keys ahead of it, all holding or claiming), and count down the keys
// ahead of w from a read made once the watch is in place. When fewer than
// N are left, w's claim starts: for the slot the deleted key names, which
// its release freed (a holder's key carries its slot), without a read; or,
// when the key named none (a waiter gave up) or the count came from a
// read, from a read. So a release costs the head alone a watch event, and
// it one write, its claim, which its successor in the chain sees. Loop
// only.
func (m semService) watchQueue(w *waiter) {
	svc := m.service
	ctx := m.rewatch(w, nil)
	// The helper's own state: keys ahead as of the revision read, and
	// whether w's turn was posted.
	left, read, posted := 0, int64(0), false
	turn := func(sn snapshot, rev int64) {
		posted = true
		m.keep(sn)
		svc.s.post(func() { m.semLooked(w, nil, rev, nil) })
	}
	look := func(rctx context.Context) error {
		sn, rev, err := m.semLook(rctx, w)
		switch {
		case err != nil && !lostErr(err):
			return err // transient: follow reopens the watch and looks again
		case err != nil:
			svc.s.post(func() { m.semLooked(w, nil, rev, err) })
			return nil
		}
		left, read = ahead(sn.queue, w.created), rev
		if left < m.n {
			turn(sn, rev)
		}
		return nil
	}
	changed := func(rctx context.Context, evs []*clientv3.Event) error {
		for _, ev := range evs {
			switch {
			case posted:
				return nil
			case ev.Type != clientv3.EventTypeDelete || ev.Kv.ModRevision <= read:
			case ev.PrevKv == nil:
				return look(rctx) // compacted away: count afresh
			case !m.queued(ev.PrevKv): // no owner's: never counted
			case ev.PrevKv.CreateRevision < w.created:
				if left--; left >= m.n {
					continue
				}
				// w's turn. A holder's key names its slot: a release
				// freed that one, unless the key was lost or still claiming.
				if slot := m.slotNamed(ev.PrevKv); slot >= 0 {
					turn(snapshot{created: w.created, hinted: true, hint: slot}, ev.Kv.ModRevision)
					return nil
				}
				return look(rctx)
			}
		}
		return nil
	}
	svc.s.goHelper(func(context.Context) {
		svc.s.follow(ctx, follower{key: m.queueDir, kind: svc.spec.kind,
			opts:   []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithPrevKV()},
			synced: func(rctx context.Context, _ int64) error { return look(rctx) }, changed: changed,
		})
	})
}

// semLook reads the queue and the slots, and the revision of the read, in a
// transaction that also confirms w's key still exists. Helper goroutine
// only.
func (m semService) semLook(ctx context.Context, w *waiter) (snapshot, int64, error) {
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.created)
	resp, err := m.s.cli.Txn(ctx).If(mine).Then(m.readOp()).Commit()
	if err != nil {
		return snapshot{}, 0, err
	}
	if !resp.Succeeded {
		return snapshot{}, 0, fmt.Errorf("%s: waiting key %s deleted by another client: %w", m.name, w.key, primitives.ErrLost)
	}
	return m.snapshotOf(w.created, resp.Header.Revision, resp.Responses[0]), resp.Header.Revision, nil
}

// errUnchanged: semLookPast found the key it was given unchanged.
var errUnchanged = errors.New("unchanged")

// semLookPast is semLook, but given still, a key w read before, it reads the
// queue only if still changed since (a claim, a deletion): two keys
// compared cost etcd much less than a read of the whole queue. If still is
// unchanged, it returns errUnchanged. Helper goroutine only.
func (m semService) semLookPast(ctx context.Context, w *waiter, still *mvccpb.KeyValue) (snapshot, int64, error) {
	if still == nil {
		return m.semLook(ctx, w)
	}
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.created)
	same := clientv3.Compare(clientv3.ModRevision(string(still.Key)), "=", still.ModRevision)
	// Else: is w's key there (its name is never reused), and the queue.
	resp, err := m.s.cli.Txn(ctx).If(mine, same).Else(clientv3.OpGet(w.key, clientv3.WithCountOnly()), m.readOp()).Commit()
	switch {
	case err != nil:
		return snapshot{}, 0, err
	case resp.Succeeded:
		return snapshot{}, resp.Header.Revision, errUnchanged
	case resp.Responses[0].GetResponseRange().Count == 0:
		return snapshot{}, 0, fmt.Errorf("%s: waiting key %s deleted by another client: %w", m.name, w.key, primitives.ErrLost)
	}
	return m.snapshotOf(w.created, resp.Header.Revision, resp.Responses[1]), resp.Header.Revision, nil
}

// semLooked settles a look, made while w watched pred (nil: the queue),
// that found w free to hold, or its key gone. Loop only.
func (m semService) semLooked(w *waiter, pred *mvccpb.KeyValue, rev int64, err error) {
	svc := m.service
	if svc.waiter != w || w.ahead != pred || w.stopWatch == nil {
		return // the waiter is gone, already claiming its slot, or watches another key
	}
	if err != nil {
		svc.stopWaiter(err)
		return
	}
	svc.holds(w, rev)
}
