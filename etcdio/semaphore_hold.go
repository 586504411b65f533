package etcdio

import (
	"context"
	"fmt"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A hold of a semaphore is two keys: the holder's queue key, which names its
// slot, and its slot key (the claim), which names the queue key. Either one
// keeps the slot taken (see free). A holder that loses one of them (deleted
// by someone else) is told Lost and deletes the other; only then is its slot
// free for the next claimant, whose token is higher.

// slotHold names the two keys of a claimed slot (the grant itself is the
// shell's driver.Hold).
type slotHold struct {
	key     string // the queue key
	created int64  // its CreateRevision
	slotKey string
	token   int64 // the claim's revision: the slot key's ModRevision
}

// claimState is what semState knows of its service's claims. Guarded by
// semState.mu.
type claimState struct {
	started  int64              // the key whose claim started last
	try      int64              // the latest key whose acquisition is a TryAcquire
	gaveUp   int64              // the latest key whose acquisition was given up
	watching int64              // the key whose hold watchHold follows
	stop     context.CancelFunc // ends that watch
}

// begin records that the claim of the key created at created starts, unless
// its acquisition was given up already.
func (st *semState) begin(created int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.claims.gaveUp >= created {
		return false
	}
	st.claims.started = created
	return true
}

// tries records that the acquisition of the key created at created is a
// TryAcquire, if try: its claim does not wait for a slot.
func (st *semState) tries(created int64, try bool) {
	if !try {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.claims.try = created
}

// isTry reports whether the acquisition of the key created at created is a
// TryAcquire.
func (st *semState) isTry(created int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.claims.try == created
}

// giveUp records that the acquisition of the key created at created ended
// without a grant: a claim not yet started never starts, the hold watch of
// its claim (if any) ends. It reports whether a claim started.
func (st *semState) giveUp(created int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.claims.gaveUp = max(st.claims.gaveUp, created)
	if st.claims.watching == created && st.claims.stop != nil {
		st.claims.stop()
		st.claims.stop = nil
	}
	return st.claims.started == created
}

// stopWatch ends the hold watch, if any.
func (st *semState) stopWatch() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.claims.stop != nil {
		st.claims.stop()
		st.claims.stop = nil
	}
}

// stopWatchOf ends the hold watch if it follows the hold of the key created
// at created, and reports whether it did.
func (st *semState) stopWatchOf(created int64) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.claims.watching != created || st.claims.stop == nil {
		return false
	}
	st.claims.stop()
	st.claims.stop = nil
	return true
}

// watchHold has two session helpers watch h's two keys, each with a watch
// of that key's deletions alone, so that no other owner's release reaches
// this holder: if one of them is deleted alone (not with the other in one
// transaction, as a release and a lease's end delete them), the lease is
// checked and, if it lives, the service is told (partLost), which ends the
// grant with Lost and deletes the other key. So a holder learns of its
// claim's deletion as soon as the watch delivers it: one watch event, a
// read of both keys and one lease check, bounded by follow's check of a
// silent watch (a quiet spell, at most 3 s) plus one attempt's bound. The
// watches end with the first deletion of either key, with the session,
// and as a release starts (Release ends them before its delete, so that
// its own deletions send this holder no event).
func (st *semState) watchHold(svc *service, h slotHold) {
	ctx, cancel := context.WithCancel(svc.s.ctx)
	st.mu.Lock()
	if st.claims.gaveUp >= h.created {
		st.mu.Unlock()
		cancel()
		return
	}
	if st.claims.stop != nil {
		st.claims.stop()
	}
	st.claims.watching, st.claims.stop = h.created, cancel
	st.mu.Unlock()
	s := svc.s
	var told atomic.Bool // the outcome was decided, by one of the two watches
	check := func(rctx context.Context) error {
		resp, err := s.cli.Txn(rctx).Then(clientv3.OpGet(h.key), clientv3.OpGet(h.slotKey)).Commit()
		if err != nil {
			return err
		}
		q, c := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
		queueGone, slotGone := len(q) == 0 || q[0].CreateRevision != h.created, len(c) == 0 || c[0].ModRevision != h.token
		switch {
		case !queueGone && !slotGone:
			return nil
		case queueGone && slotGone:
			cancel() // released, or the lease ended: the session tells
			return nil
		}
		tctx, done := s.attempt(rctx)
		ttl, err := s.cli.TimeToLive(tctx, s.lease)
		done(err)
		switch {
		case told.Load():
		case leaseEnded(ttl, err):
			if !told.Swap(true) {
				s.post(s.leaseGone)
			}
		case err != nil:
			return err // follow reopens the watch and reads again
		default:
			part := "queue key " + h.key
			if slotGone {
				part = "slot key " + h.slotKey
			}
			if !told.Swap(true) {
				s.post(func() { st.partLost(svc, h, part) })
			}
		}
		cancel()
		return nil
	}
	for _, key := range []struct {
		name string
		rev  int64 // the key's revision h knows: a deletion comes later
	}{{h.key, h.created}, {h.slotKey, h.token}} {
		s.goHelper(func(context.Context) {
			defer cancel()
			s.follow(ctx, follower{key: key.name, opts: []clientv3.OpOption{clientv3.WithFilterPut()}, kind: svc.spec.kind,
				synced: func(rctx context.Context, _ int64) error { return check(rctx) },
				changed: func(rctx context.Context, evs []*clientv3.Event) error {
					for _, ev := range evs {
						if ev.Type == clientv3.EventTypeDelete && ev.Kv.ModRevision > key.rev {
							return check(rctx)
						}
					}
					return nil
				},
			})
		})
	}
}

// partLost: one of h's keys was deleted by someone else while the lease
// lives. The driver.Hold, if still h's and not being released, ends with Lost
// (also after a release of it failed: a release deletes both keys in one
// transaction, never one alone, so unlike a lock's key, the deletion is not
// perhaps the failed release's); then h's other key is deleted, which frees
// the slot. Loop only.
func (st *semState) partLost(svc *service, h slotHold, part string) {
	if svc.Ended() {
		return
	}
	if g := svc.Held(); g != nil && g.Created == h.created {
		if g.Releasing() {
			return // the release deletes what is left
		}
		svc.End(g.Lost(svc.partDeleted(part)), CauseKeyDeleted)
	}
	svc.s.goHelper(func(context.Context) { st.dropHold(svc.s, h) })
}

// dropHold deletes what is left of h, in one transaction, retrying in the
// background until it succeeds or the session ends.
func (st *semState) dropHold(s *Session, h slotHold) {
	defer s.deletedOnce(h.key)
	_ = s.persist("hold "+h.key, func(ctx context.Context) error { return st.dropRequest(ctx, s, h) })
}

// dropHoldWithin deletes what is left of h, in one transaction: once
// within ctx, and if that fails in the background as dropHold does.
func (st *semState) dropHoldWithin(ctx context.Context, s *Session, h slotHold) {
	if err := s.once(ctx, func(ctx context.Context) error { return st.dropRequest(ctx, s, h) }); err != nil {
		s.goHelper(func(context.Context) { st.dropHold(s, h) })
		return
	}
	s.deletedOnce(h.key)
}

// dropRequest deletes h's queue key if it is still h's, and its slot key
// if the claim is still h's, in one transaction.
func (st *semState) dropRequest(ctx context.Context, s *Session, h slotHold) error {
	_, err := s.cli.Txn(ctx).Then(
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(h.key), "=", h.created)}, []clientv3.Op{clientv3.OpDelete(h.key)}, nil),
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(h.slotKey), "=", h.token)}, []clientv3.Op{clientv3.OpDelete(h.slotKey)}, nil),
	).Commit()
	return err
}

// dropClaim undoes the claim of w's key, whose acquisition ended without a
// grant (its caller gave up, or the service or its key went): after w's
// key is deleted, no claim of it can succeed (each requires the key), so
// the one transaction that deletes the key and reads the slots finds every
// claim of w that did, and those are deleted. Nothing is done if no claim
// started.
func (m semService) dropClaim(w *waiter) {
	if !m.giveUp(w.created) {
		return
	}
	s := m.s
	owner := w.key + "@" + fmt.Sprint(w.created)
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.created)
	defer s.deletedOnce(w.key)
	_ = s.persist("claim of "+w.key, func(ctx context.Context) error {
		resp, err := s.cli.Txn(ctx).Then(clientv3.OpTxn([]clientv3.Cmp{mine}, []clientv3.Op{clientv3.OpDelete(w.key)}, nil),
			clientv3.OpGet(m.slotDir, clientv3.WithPrefix())).Commit()
		if err != nil {
			return err
		}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			if string(kv.Value) != owner {
				continue
			}
			if _, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
				Then(clientv3.OpDelete(string(kv.Key))).Commit(); err != nil {
				return err
			}
		}
		return nil
	})
}

// Close ends the service as every primitive's Close does and, on a shared
// session, also deletes the slot key of the hold it ends, so that the slot
// is free at once (with its own session, the lease takes it). If etcd did
// not take the delete of the queue key, the slot key goes in the
// background too: Close waits for one attempt, as every Close does.
func (m semService) Close() error {
	return m.CloseOnce(func() error {
		m.stopWatch()
		g, held, err := m.closeEnding()
		m.stopWatch() // one a grant made meanwhile started
		if held && !m.owned && m.s.Err() == nil {
			if slot := m.slotOf(g.Created); slot >= 0 {
				h := slotHold{key: g.Key, created: g.Created, slotKey: m.slotDir + fmt.Sprint(slot), token: int64(g.Token)}
				if err != nil {
					m.s.goHelper(func(context.Context) { m.dropHold(m.s, h) })
				} else {
					m.dropHold(m.s, h)
				}
			}
		}
		return err
	})
}
