package etcdio

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// grant is the loop's record of what a service holds: a key it created and
// holds until it deletes it (a release), someone else does, or the session
// ends. It is born whole, token included (see grantWaiter).
type grant struct {
	key       string
	created   int64 // the key's CreateRevision: names the grant
	token     int64
	mode      rwlock.Mode // rwlocks
	value     string      // elections: the leader's value
	releasing int         // releases in flight: the key's deletion is theirs
	waited    bool        // the grant came after waiting behind another owner
	since     time.Time   // when the grant was recorded
	// vanished: the key was seen deleted; Lost waits for the lease check to
	// say whether someone deleted it or the lease went with it.
	vanished bool
}

func (g *grant) acquired() primitives.Event {
	return primitives.Acquired{Key: g.key, Token: fencing.Token(g.token), Created: g.created}
}

func (g *grant) released() primitives.Event {
	return primitives.Released{Key: g.key, Token: fencing.Token(g.token), Created: g.created}
}

func (g *grant) lost(err error) primitives.Event {
	return primitives.Lost{Key: g.key, Token: fencing.Token(g.token), Created: g.created, Err: err}
}

// setGrant makes g the current grant (nil: none), on the loop and in the
// copy that Term reads. Loop only.
func (svc *service) setGrant(g *grant) {
	svc.grant = g
	svc.termMu.Lock()
	if g != nil {
		svc.term = *g
	} else {
		svc.term = grant{}
	}
	svc.termMu.Unlock()
}

// current returns the copy of the current grant; ok is false if none.
func (svc *service) current() (g grant, ok bool) {
	svc.termMu.Lock()
	defer svc.termMu.Unlock()
	return svc.term, svc.term.key != ""
}

// recordGrant makes g the service's grant if its caller takes it, and
// publishes Acquired (and Suspended, if the session is suspended). The grant
// is recorded before the answer, so that Term sees it as soon as Campaign
// returns; a refused answer (the caller gave up, and deletes its key) undoes
// it and reports false. Loop only.
func (svc *service) recordGrant(g grant, r actor.Reply[grant]) bool {
	g.since = time.Now()
	svc.setGrant(&g)
	if !r.Answer(g, nil) {
		svc.setGrant(nil)
		return false
	}
	svc.events.Publish(g.acquired())
	if svc.s.suspended {
		svc.events.Publish(primitives.Suspended{Key: g.key, Token: fencing.Token(g.token), Created: g.created, Deadline: svc.s.deadline})
	}
	return true
}

// endGrant ends the current grant, frees the semaphore, and publishes ev;
// cause is the loss's (a Cause constant), "" for a release. Loop only.
func (svc *service) endGrant(ev primitives.Event, cause string) {
	if g := svc.grant; g != nil {
		svc.metrics.ended(svc.spec.kind, time.Since(g.since), cause)
	}
	svc.setGrant(nil)
	// A grant always owns the semaphore; never let a broken invariant block
	// the loop (and with it the keepalive).
	select {
	case <-svc.sem:
	default:
		svc.s.log.Error("grant ended without its semaphore: " + svc.name)
	}
	if ev != nil {
		svc.events.Publish(ev)
	}
}

// endGrantFor ends the grant, if any, because the session or the service
// ends with err (Released if closed, Lost otherwise), and returns its key for
// deletion. Loop only.
func (svc *service) endGrantFor(err error) []keyRev {
	g := svc.grant
	if g == nil {
		return nil
	}
	if errors.Is(err, primitives.ErrClosed) {
		svc.endGrant(g.released(), "")
	} else {
		svc.endGrant(g.lost(err), svc.s.lossCause)
	}
	return []keyRev{{g.key, g.created}}
}

// checkGrant notices a grant whose key vanished, unless a release of it is in
// flight, and asks the session whether its lease went too; Lost follows in
// vanishedConfirmed (or with the session's end). Loop only.
func (svc *service) checkGrant() {
	if g := svc.grant; g != nil && g.releasing == 0 && !g.vanished && svc.gone(g.key, g.created) {
		g.vanished = true
		svc.s.checkLease()
	}
}

// vanishedConfirmed ends a vanished grant with Lost, its key deleted by
// someone else while the lease lives. Loop only.
func (svc *service) vanishedConfirmed() {
	if g := svc.grant; g != nil && g.vanished && g.releasing == 0 {
		svc.endGrant(g.lost(fmt.Errorf("%s: key %s deleted by another client: %w", svc.name, g.key, primitives.ErrLost)), CauseKeyDeleted)
	}
}

// suspend and resume tell the grant's owner that its session went
// unconfirmed, and that it was confirmed again. Loop only.
func (svc *service) suspend(deadline time.Time) {
	if g := svc.grant; g != nil {
		svc.events.Publish(primitives.Suspended{Key: g.key, Token: fencing.Token(g.token), Created: g.created, Deadline: deadline})
	}
}

func (svc *service) resume() {
	if g := svc.grant; g != nil {
		svc.events.Publish(primitives.Resumed{Key: g.key, Token: fencing.Token(g.token), Created: g.created})
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
	if svc.spec.mirrorAll {
		svc.electionChanged(m)
		return
	}
	svc.checkGrant()
	if w := svc.waiter; w != nil && svc.gone(w.key, w.created) {
		svc.stopWaiter(fmt.Errorf("%s: waiting key %s deleted by another client: %w", svc.name, w.key, primitives.ErrLost))
	}
}

// withGrant runs f on the loop with the current grant, if match accepts it,
// and returns a copy; otherwise errNotHeld.
func (svc *service) withGrant(ctx context.Context, match func(grant) bool, f func(*grant)) (grant, error) {
	g, err := call(ctx, svc.s, func(r actor.Reply[grant]) { svc.onGrant(match, f, r) })
	if err != nil {
		return grant{}, svc.callErr(ctx, err)
	}
	return g, nil
}

// onGrant: see withGrant. Loop only.
func (svc *service) onGrant(match func(grant) bool, f func(*grant), r actor.Reply[grant]) {
	g := svc.grant
	switch {
	case svc.ended:
		r.Answer(grant{}, svc.Err())
	case g == nil || g.vanished || match != nil && !match(*g):
		r.Answer(grant{}, fmt.Errorf("%s: %w", svc.name, svc.spec.errNotHeld))
	case r.Answer(*g, nil):
		f(g)
	}
}

// exactly matches the grant created at created (zero never matches) if it
// also has key and token: a grant given back with any of them altered is not
// the grant that was issued.
func exactly(created int64, key string, token fencing.Token) func(grant) bool {
	return func(g grant) bool {
		return created != 0 && g.created == created && g.key == key && fencing.Token(g.token) == token
	}
}

// release deletes the key of the current grant (the one match accepts) only
// if it is still that grant's, so a late retry never deletes a newer grant.
// A failed request keeps the grant, so the release can be retried.
func (svc *service) release(ctx context.Context, match func(grant) bool) error {
	g, err := svc.withGrant(ctx, match, func(g *grant) { g.releasing++ })
	if err != nil {
		return err
	}
	resp, terr := svc.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.created)).
		Then(clientv3.OpDelete(g.key)).Commit()
	_, err = call(context.WithoutCancel(ctx), svc.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, svc.released(g, resp, terr))
	})
	return err
}

// released settles a release's delete. Loop only.
func (svc *service) released(g grant, resp *clientv3.TxnResponse, terr error) error {
	cur := svc.grant
	if cur == nil || cur.created != g.created {
		// The grant ended meanwhile, which only the session's end does.
		if svc.ended {
			return svc.Err()
		}
		return fmt.Errorf("%s: %w", svc.name, svc.spec.errNotHeld)
	}
	cur.releasing--
	switch {
	case terr == nil && resp.Succeeded:
		svc.seen = max(svc.seen, resp.Header.Revision)
		svc.endGrant(cur.released(), "")
		return nil
	case terr != nil && svc.gone(cur.key, cur.created):
		svc.endGrant(cur.released(), "")
		return nil
	case terr != nil:
		return fmt.Errorf("%s: release %s: %w", svc.name, cur.key, terr)
	default:
		// Someone else deleted the key: the grant was lost before the release.
		svc.endGrant(cur.lost(fmt.Errorf("%s: key %s deleted by another client: %w", svc.name, cur.key, primitives.ErrLost)), CauseKeyDeleted)
		return fmt.Errorf("%s: key %s was already gone: %w", svc.name, cur.key, svc.spec.errNotHeld)
	}
}
