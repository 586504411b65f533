package etcdio

import (
	"context"
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
	w, resp, err := m.create(ctx, m.queueDir, "", []clientv3.Cmp{agrees}, m.readOp())
	if err != nil {
		return driver.Hold{}, err
	}
	if resp == nil {
		return driver.Hold{}, fmt.Errorf("%s: %s no longer says %d permits (changed or retired): %w",
			m.name, m.cfgKey, m.n, semaphore.ErrPermitMismatch)
	}
	sn := m.snapshotOf(w.created, w.created, resp.Responses[0])
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
	g, err := m.park(ctx, w, func(r actor.Reply[driver.Hold]) { m.semEnqueued(w, count, r) })
	if err != nil {
		m.dropClaim(w)
	}
	return g, err
}

// semEnqueued parks the caller of a new queue key, with count keys ahead of
// it, until it holds. Loop only.
func (m semService) semEnqueued(w *waiter, count int, r actor.Reply[driver.Hold]) {
	svc := m.service
	if !svc.parkable(w, r) {
		return
	}
	w.reply = r
	w.waited = count >= m.n
	svc.waiter = w
	if !w.waited {
		svc.holds(w, w.created) // the spec's token claims a slot
		return
	}
	m.watchQueue(w)
}

// watchQueue has a session helper watch the queue's deletions (with the
// deleted keys' previous values) and count down the keys ahead of w from a
// read made once the watch is in place. When fewer than N are left, w's
// claim starts: for the slot the deleted key names, which its release freed
// (a holder's key carries its slot), without a read; or, when the key named
// none (a waiter gave up) or the count came from a read, from a read. So a
// release costs each waiter a watch event, and the waiter whose turn it is
// one write, its claim. Loop only.
func (m semService) watchQueue(w *waiter) {
	svc := m.service
	ctx, cancel := context.WithCancel(svc.s.ctx)
	w.stopWatch = cancel
	// The helper's own state: keys ahead as of the revision read, and
	// whether w's turn was posted.
	left, read, posted := 0, int64(0), false
	turn := func(sn snapshot, rev int64) {
		posted = true
		m.keep(sn)
		svc.s.post(func() { m.semLooked(w, rev, nil) })
	}
	look := func(rctx context.Context) error {
		sn, rev, err := m.semLook(rctx, w)
		switch {
		case err != nil && !lostErr(err):
			return err // transient: follow reopens the watch and looks again
		case err != nil:
			svc.s.post(func() { m.semLooked(w, rev, err) })
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
			case ev.PrevKv.CreateRevision < w.created:
				if left--; left >= m.n {
					continue
				}
				// w's turn. A holder's key names its slot: a release
				// freed that one, unless the key was lost or still claiming.
				if slot, err := strconv.Atoi(string(ev.PrevKv.Value)); err == nil && slot >= 0 && slot < m.n {
					turn(snapshot{created: w.created, hinted: true, hint: slot}, ev.Kv.ModRevision)
					return nil
				}
				return look(rctx)
			}
		}
		return nil
	}
	svc.s.goHelper(func(context.Context) {
		svc.s.follow(ctx, follower{key: m.queueDir,
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

// semLooked settles a look that found w free to hold, or its key gone. Loop
// only.
func (m semService) semLooked(w *waiter, rev int64, err error) {
	svc := m.service
	if svc.waiter != w || w.stopWatch == nil {
		return // the waiter is gone, or already claiming its slot
	}
	if err != nil {
		svc.stopWaiter(err)
		return
	}
	svc.holds(w, rev)
}
