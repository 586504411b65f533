package etcdio

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// A service's grant is the shell's driver.Hold: its key, the key's
// CreateRevision (Created), its token and, for rwlocks and elections, its
// mode and value. What is etcd's alone is below: a held key seen deleted
// ("vanished") waits for the lease check to say whether someone deleted it
// or the lease went with it.

// recordGrant makes g the service's grant if its caller takes it (see
// driver.Shell.Grant). Loop only.
func (svc *service) recordGrant(g driver.Hold, w *waiter) bool {
	g.LeaseID = int64(svc.s.lease)
	if !svc.Grant(g, w.start, func(h driver.Hold) bool { return w.reply.Answer(h, nil) }) {
		return false
	}
	svc.watchOwnSoon()
	return true
}

// A lock-like service notices a key of its own deleted by someone else
// (or its lease revoked) from a watch of its session's own keys (deletions
// only, shared by the session's services on the same queue), but only once
// a grant of it has lived for driver.HoldWatchAfter, or a waiting key for
// driver.WaitWatchAfter (a quarter of the TTL). Short holds and waits, the
// common ones under contention, are not watched, so their releases send
// their own session no watch event and open and close no watch. A long
// hold learns of its key's deletion within HoldWatchAfter and a round
// trip, a long wait within a quarter of the TTL and a round trip: both well
// within half of it. The watch closes when it brings news while no hold or
// wait of that age is left.

// ownWatchDue returns when the service's current hold or wait will need
// the watch of its own keys (or needed it); false if it neither holds nor
// waits. Loop only.
func (svc *service) ownWatchDue() (time.Time, bool) {
	var due time.Time
	if w := svc.waiter; w != nil {
		due = w.start.Add(driver.WaitWatchAfter(svc.s.ttl))
	}
	if g := svc.Held(); g != nil {
		if d := g.Since.Add(min(driver.HoldWatchAfter, driver.WaitWatchAfter(svc.s.ttl))); due.IsZero() || d.Before(due) {
			due = d
		}
	}
	return due, !due.IsZero()
}

// watchOwnSoon arms the timer that opens the watch of the service's own
// keys when its current hold or wait needs it, unless the watch is open,
// the timer armed for that moment or earlier, or the service idle. A timer
// that fires for nothing arms itself again (watchOwn). Loop only.
func (svc *service) watchOwnSoon() {
	if svc.mirrors != nil || svc.Ended() {
		return
	}
	due, busy := svc.ownWatchDue()
	if !busy || svc.ownTimer != nil && !due.Before(svc.ownDue) {
		return
	}
	if svc.ownTimer != nil {
		svc.ownTimer.Stop() // a grant needs the watch sooner than its wait did
	}
	svc.ownDue = due
	svc.ownTimer = time.AfterFunc(time.Until(due), func() { svc.s.post(svc.watchOwn) })
}

// watchOwn opens the watch of the service's own keys if its current hold or
// wait needs it, or arms the timer again for a younger one. Loop only.
func (svc *service) watchOwn() {
	svc.ownTimer = nil
	if svc.Ended() || svc.mirrors != nil || !svc.ownWatched() {
		svc.watchOwnSoon()
		return
	}
	for _, q := range svc.spec.ownQueues {
		svc.mirrors = append(svc.mirrors, svc.s.openMirror(mirrorID{prefix: svc.s.ownPrefix(svc.prefix + q)}, svc))
	}
}

// ownWatched reports whether the service's current hold or wait needs the
// watch of its own keys now. Loop only.
func (svc *service) ownWatched() bool {
	due, busy := svc.ownWatchDue()
	return busy && !time.Now().Before(due)
}

// closeMirrors closes the service's mirrors (and disarms the timer of its
// own keys' watch). Loop only.
func (svc *service) closeMirrors() {
	if svc.ownTimer != nil {
		svc.ownTimer.Stop()
		svc.ownTimer = nil
	}
	ms := svc.mirrors
	svc.mirrors = nil
	for _, m := range ms {
		svc.s.closeMirror(m, svc)
	}
}

// endGrantFor ends the driver.Hold, if any, because the session or the service
// ends with err (Released if closed, Lost otherwise), and returns its key for
// deletion. Loop only.
func (svc *service) endGrantFor(err error) []keyRev {
	g, ok := svc.EndFor(err, svc.s.lossCause)
	if !ok {
		return nil
	}
	return []keyRev{{g.Key, g.Created}}
}

// checkGrant notices a grant whose key vanished and, unless a release of it
// is in flight, asks the session whether its lease went too; Lost follows
// in vanishedConfirmed (or with the session's end). A release in flight
// settles it (see keyGone): the deletion is remembered for it, since a
// mirror of the session's own keys remembers only its latest deletions,
// and reports each once. Loop only.
func (svc *service) checkGrant() {
	g := svc.Held()
	if g == nil || svc.vanished == g.Created || !svc.gone(g.Key, g.Created) {
		return
	}
	svc.vanished = g.Created
	if !g.Releasing() {
		svc.s.checkLease()
	}
}

// keyGone reports whether g's key is known to be deleted: seen gone while
// g stood (checkGrant), or known so to the mirror now. Loop only.
func (svc *service) keyGone(g driver.Hold) bool {
	return svc.vanished == g.Created || svc.gone(g.Key, g.Created)
}

// vanishedConfirmed ends a vanished grant with Lost, its key deleted by
// someone else while the lease lives. Loop only.
func (svc *service) vanishedConfirmed() {
	if g := svc.Held(); g != nil && svc.vanished == g.Created && !g.Releasing() {
		svc.s.deletedOnce(g.Key) // an unsure write of it may still land
		svc.Lose(svc.KeyDeleted(g.Key), metrics.CauseKeyDeleted)
	}
}

// mirrorOf returns the service's mirror whose prefix covers key, or nil.
// Loop only.
func (svc *service) mirrorOf(key string) *mirror {
	for _, m := range svc.mirrors {
		if len(key) >= len(m.prefix) && key[:len(m.prefix)] == m.prefix {
			return m
		}
	}
	return nil
}

// gone reports whether key, created at rev, is known to be deleted: a
// mirror covering it has reached rev and no longer has it. Loop only.
func (svc *service) gone(key string, rev int64) bool {
	m := svc.mirrorOf(key)
	return m != nil && m.gone(key, rev)
}

// mirrorChanged is told of every change of a mirror the service uses.
// Loop only.
func (svc *service) mirrorChanged(m *mirror) {
	if m == svc.leaderMirror {
		svc.electionChanged(m)
		return
	}
	if m == svc.aheadMirror {
		svc.aheadChanged()
		return
	}
	svc.checkGrant()
	if w := svc.waiter; w != nil && svc.gone(w.key, w.created) {
		svc.stopWaiter(fmt.Errorf("%s: waiting key %s deleted by another client: %w", svc.name, w.key, primitives.ErrLost))
	}
	if !svc.ownWatched() {
		// News of a key the watch no longer needs to cover (most often
		// the service's own release): close it, and arm the timer again
		// for a young hold or wait.
		svc.closeMirrors()
		svc.watchOwnSoon()
	}
}

// withGrant runs f on the loop with the current driver.Hold, if match accepts it
// and it stands, and returns a copy; otherwise the error of driver.Shell.On.
func (svc *service) withGrant(ctx context.Context, match driver.Match, f func()) (driver.Hold, error) {
	g, err := call(ctx, svc.s, func(r actor.Reply[driver.Hold]) {
		g, err := svc.On(svc.standing(match))
		if r.Answer(g, err) && err == nil {
			f()
		}
	})
	if err != nil {
		return driver.Hold{}, svc.callErr(ctx, err)
	}
	return g, nil
}

// standing narrows match to a grant not seen vanished. Loop only.
func (svc *service) standing(match driver.Match) driver.Match {
	return func(h driver.Hold) bool {
		return svc.vanished != h.Created && (match == nil || match(h))
	}
}

// release deletes the key of the current grant (the one match accepts) only
// if it is still that grant's, so a late retry never deletes a newer grant.
// A failed request keeps the driver.Hold, so the release can be retried.
// A grant whose key was seen gone is not deleted again: settleVanished
// tells whether it went with the lease.
func (svc *service) release(ctx context.Context, match driver.Match) error {
	g, vanished, err := svc.beginReleaseSeen(ctx, match)
	if err != nil {
		return err
	}
	if vanished {
		return svc.settleVanished(ctx, g)
	}
	return svc.deleteHeld(ctx, g, nil)
}

// beginReleaseSeen marks a release of the current grant (the one match
// accepts) in flight, whether or not its key was seen gone, and returns
// it and whether it was: such a release deletes nothing of the grant's
// key and settles with settleVanished.
func (svc *service) beginReleaseSeen(ctx context.Context, match driver.Match) (driver.Hold, bool, error) {
	type begun struct {
		g        driver.Hold
		vanished bool
	}
	b, err := call(ctx, svc.s, func(r actor.Reply[begun]) {
		svc.BeginReleaseFor(match, func(g driver.Hold, err error) bool {
			return r.Answer(begun{g, err == nil && svc.vanished == g.Created}, err)
		})
	})
	if err != nil {
		return driver.Hold{}, false, svc.callErr(ctx, err)
	}
	return b.g, b.vanished, nil
}

// settleVanished settles the release of g, whose key was seen gone before
// the release began (the lease check that follows has not answered): it
// asks whether the lease lives. If not, the session is lost, and the
// release returns its error (ErrLost); else someone else deleted the key,
// and the release ends the grant Lost, as one whose delete finds the key
// gone does. If etcd does not say within ctx, the release is undone and
// fails, and the session's lease check ends the grant: the one under way,
// or a new one, since one that answered meanwhile left the grant to this
// release.
func (svc *service) settleVanished(ctx context.Context, g driver.Hold) error {
	dctx, cancel := ctxtime.WithDone(ctx, svc.s.done)
	defer cancel()
	ended, aerr := svc.s.askLease(dctx)
	return svc.settle(ctx, ended, func() error {
		if aerr != nil {
			return svc.leaseUnknown(ctx, g, aerr)
		}
		svc.s.deletedOnce(g.Key) // an unsure write of it may still land
		return svc.SettleRelease(g, driver.Gone, nil)
	})
}

// leaseUnknown undoes the release of g, whose key is gone, when etcd did
// not say whether the lease lives (aerr is why): the key stands seen gone,
// and the session's lease check (the one under way, or a new one) ends the
// grant for the cause it finds; the release fails with aerr. Loop only.
func (svc *service) leaseUnknown(ctx context.Context, g driver.Hold, aerr error) error {
	if svc.SettleRelease(g, driver.Unsent, nil) == nil {
		svc.vanished = g.Created
		svc.s.checkLease()
	}
	return fmt.Errorf("%s: release %s, seen gone: ask for lease: %w", svc.name, g.Key, svc.callErr(ctx, aerr))
}

// deleteHeld deletes g's key, being released, only if it is still g's,
// with extra in the same transaction whether or not it is (extra's deletes
// carry their own conditions: a semaphore's claim goes even if its queue
// key was deleted by someone else), in attempts, and settles the release
// (see released). A transaction that deleted g's key asks partGone (if
// not nil) whether it found another part of the hold deleted by someone
// else (a semaphore's slot key): if it names one, the hold was lost before
// the release (see partGone). The delete ends with the session too: once
// it is lost, the lease takes the key, and the caller learns the loss now,
// not at ctx's end.
func (svc *service) deleteHeld(ctx context.Context, g driver.Hold, partGone func(*clientv3.TxnResponse) string, extra ...clientv3.Op) error {
	dctx, cancel := ctxtime.WithDone(ctx, svc.s.done)
	defer cancel()
	resp, repeated, terr := svc.s.txn(dctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Created)},
		append([]clientv3.Op{clientv3.OpDelete(g.Key)}, extra...), extra...)
	// A key found gone went with the lease (the session lost: the hold is
	// Lost with it) or was deleted by someone else: ask which, as a
	// watched grant's vanishing does, before telling anyone. If etcd does
	// not say, neither is told: the release fails (see leaseUnknown).
	gone := terr == nil && !resp.Succeeded && !repeated
	var withLease bool
	var aerr error
	if gone {
		withLease, aerr = svc.s.askLease(dctx)
	}
	return svc.settle(ctx, withLease, func() error {
		if terr == nil || svc.keyGone(g) {
			svc.s.deletedOnce(g.Key)
		}
		if gone && aerr != nil {
			return svc.leaseUnknown(ctx, g, aerr)
		}
		if terr == nil && resp.Succeeded && partGone != nil {
			if part := partGone(resp); part != "" {
				return svc.partGone(g, part)
			}
		}
		return svc.released(g, resp, repeated, terr)
	})
}

// partGone settles the release of g, which deleted g's key and found part
// of the hold (another key of it) deleted by someone else: the hold was
// lost before the release, so it ends Lost and the release returns an
// error wrapping the spec's ErrNotHeld, as one that finds g's key gone
// does. An earlier release of g that failed did not delete part, or it
// would have deleted g's key with it. Loop only.
func (svc *service) partGone(g driver.Hold, part string) error {
	if err := svc.SettleRelease(g, driver.Unsent, nil); err != nil {
		return err
	}
	svc.End(g.Lost(svc.partDeleted(part)), metrics.CauseKeyDeleted)
	return fmt.Errorf("%s: %s was already gone: %w", svc.name, part, svc.spec.errNotHeld)
}

// partDeleted is the loss of a hold part of which (a key, named by part)
// someone else deleted.
func (svc *service) partDeleted(part string) error {
	return fmt.Errorf("%s: %s deleted by another client: %w", svc.name, part, primitives.ErrLost)
}

// settle runs f on the loop, whether or not ctx ended, to settle a release
// and return its error; if the lease ended (withLease), the session ends
// first, and the release returns the session's loss. Every hold of the
// session is Lost with it, the released one too.
func (svc *service) settle(ctx context.Context, withLease bool, f func() error) error {
	_, err := call(context.WithoutCancel(ctx), svc.s, func(r actor.Reply[struct{}]) {
		if withLease {
			svc.s.leaseGone()
			if err := svc.Err(); err != nil {
				r.Answer(struct{}{}, err)
				return
			}
		}
		r.Answer(struct{}{}, f())
	})
	return err
}

// released settles a release's delete, made in attempts (repeated: more than
// one). Loop only.
func (svc *service) released(g driver.Hold, resp *clientv3.TxnResponse, repeated bool, terr error) error {
	switch {
	case terr == nil && (resp.Succeeded || repeated):
		// A repeat that finds the key gone follows an attempt that was
		// given up, and may have deleted it: gone either way.
		svc.seen = max(svc.seen, resp.Header.Revision)
		return svc.SettleRelease(g, driver.Deleted, nil)
	case terr != nil && svc.keyGone(g):
		// Its own delete, whose answer was lost, or someone else's.
		return svc.SettleRelease(g, driver.Deleted, nil)
	case terr != nil:
		return svc.SettleRelease(g, driver.Failed, terr)
	default:
		// Someone else deleted the key: the grant was lost before the release.
		return svc.SettleRelease(g, driver.Gone, nil)
	}
}
