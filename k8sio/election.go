package k8sio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/internal/nilness"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
)

// NewElection returns a candidate of the election on the Lease name in
// namespace, on a session of its own (made as NewSession makes one) or on
// the one WithSession gives. A session has at most one candidate per
// election: its identity is the holderIdentity. Bad input (a nil client,
// also a nil *kubernetes.Clientset, or one with no REST client to ask the
// server's version with, as client-go's fake clientset; a namespace or
// name Kubernetes refuses, a name with ".disco-candidate-", bad options)
// is an error wrapping primitives.ErrInvalidArgument; a server older than
// Kubernetes 1.35 one wrapping ErrServerTooOld.
//
// See the package doc for the token, what waiting costs and how it
// interoperates with client-go's leaderelection.
func NewElection(cs kubernetes.Interface, namespace, name string, opts ...Option) (election.Service, error) {
	fail := func(err error) error {
		return fmt.Errorf("k8sio: new election %s/%s: %w", quote.Name(namespace), quote.Name(name), err)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fail(err)
	}
	if nilness.Is(cs) {
		return nil, fail(fmt.Errorf("nil client: %w", ErrInvalidArgument))
	}
	if err := checkNames(namespace, name); err != nil {
		return nil, fail(err)
	}
	s, own := o.session, false
	if s == nil {
		if s, err = newSession(cs, o); err != nil {
			return nil, fail(err)
		}
		own = true
	} else if s.cs != cs {
		return nil, fail(fmt.Errorf("WithSession: the session runs on another client: %w", ErrInvalidArgument))
	}
	m := o.Metrics
	if m == nil {
		m = s.metrics
	}
	key := namespace + "/" + name
	v := &service{
		s: s, own: own, ns: namespace, name: name, key: key,
		leases:    cs.CoordinationV1().Leases(namespace),
		observers: actor.NewFanout(func(election.Leadership) bool { return true }),
		Shell: driver.NewShell(driver.Spec{Kind: "election", Name: "k8sio: election " + key,
			NotHeld: election.ErrNotLeader, Taken: lock.ErrLockTaken, CancelOnSuspend: o.CancelOnSuspend, Metrics: m}),
	}
	if err := o.Context.Err(); err != nil {
		if own {
			s.Close()
		}
		return nil, fail(err)
	}
	// The registration is the loop's alone and quick: it is not bounded by
	// WithContext, so that it is either done or never made.
	_, err = loopCall(s, context.Background(), func() (struct{}, error) {
		for u := range s.services {
			if u.key == key {
				return struct{}{}, fmt.Errorf("the session already has a candidate of this election (its identity is the holderIdentity): %w", ErrInvalidArgument)
			}
		}
		s.services[v] = struct{}{}
		if s.clock.Suspended() {
			v.Suspend(s.clock.Deadline())
		}
		ctx, cancel := context.WithCancel(s.ctx)
		v.stop = cancel
		v.follow(ctx, name, func(l *coordinationv1.Lease, rv string) { v.observed(l, rv) })
		return struct{}{}, nil
	})
	if err != nil {
		if own {
			s.Close()
		}
		return nil, fail(err)
	}
	return v, nil
}

// service is one candidate: an election.Service. Its shell's loop-only
// methods, and the fields below "Loop only", belong to its session's loop.
type service struct {
	*driver.Shell
	s         *Session
	own       bool
	ns, name  string
	key       string // namespace/name: every Leadership's Key
	leases    coordinationv1client.LeaseInterface
	observers *actor.Fanout[election.Leadership]
	followers sync.WaitGroup
	// withdrawals counts the deletes of its Campaigns' records under way,
	// so that Close waits for those a Campaign that gave up left to go on
	// without it.
	withdrawals inflight.Counter

	// Loop only.
	stop    context.CancelFunc // stops the followers
	cur     *coordinationv1.Lease
	curRV   fencing.Token // the resourceVersion cur is known at (0: nothing known; cur nil: absent, or stale after a conflict)
	rec     record        // cur's record, and when it was first seen
	seenAt  time.Time
	leader  election.Leadership // the latest told to observers
	camp    *campaign
	dropped <-chan struct{} // closed once the last Campaign's record is deleted (or given up)
	// orphan is the token of a take whose Campaign ended without it, and
	// that may still land (the API server may apply a write after its
	// client gave up on it): nobody holds that term, so the service
	// resigns it if the Lease shows it. 0: none. Once the Lease is past
	// that version in any other state, the take can no longer land.
	orphan fencing.Token
	// orphanRetry is when a resign of orphan that failed is tried again
	// (zero: none due), whether or not the Lease changes meanwhile;
	// orphanWait is the wait before the retry after that.
	orphanRetry time.Time
	orphanWait  time.Duration
}

// campaign is a Campaign waiting for the Lease.
type campaign struct {
	value     string
	reply     actor.Reply[driver.Hold]
	began     time.Time
	waited    bool
	wakeAt    time.Time     // when to try next
	tried     fencing.Token // the token of the last take whose outcome is unknown
	record    string        // the candidate's record, once written ("": none yet)
	renewed   time.Time     // the renewTime of the record's last renewal sent
	endRecord context.CancelFunc
	// recordName is the record's name, chosen at its first create and kept
	// for the Campaign: a create whose answer was lost may have landed.
	recordName string
	// recordRetry is when a failed create of the record is tried again
	// (zero: none due), however the Lease changes meanwhile.
	recordRetry time.Time
}

// follow runs follow on a helper of the service; deliveries go to the loop.
func (v *service) follow(ctx context.Context, name string, deliver func(*coordinationv1.Lease, string)) {
	v.followers.Add(1)
	v.s.goHelper(func() {
		defer v.followers.Done()
		follow(ctx, v.leases, name, func(l *coordinationv1.Lease, rv string) {
			v.s.post(func() { deliver(l, rv) })
		})
	})
}

// mine reports whether l is held in the term h. Loop only.
func (v *service) mine(l *coordinationv1.Lease, h *driver.Hold) bool {
	if l == nil || h == nil || holderOf(l) != v.s.id {
		return false
	}
	tok, ok := termOf(l)
	return ok && tok == h.Token
}

// observed records that the Lease was l (nil: absent) at rv, unless the
// service knows a later state; then tells observers of a new leader, ends
// a term that is no longer this candidate's, and lets a waiting Campaign
// try. Loop only.
func (v *service) observed(l *coordinationv1.Lease, rv string) {
	if v.Ended() {
		return
	}
	n, err := parseRV(rv)
	if err != nil {
		v.s.log.Warn("k8sio: unordered resourceVersion", zap.String("lease", v.key), zap.Error(err))
		return
	}
	if n < v.curRV || n == v.curRV && l != nil && v.cur == nil {
		return
	}
	v.cur, v.curRV = l, n
	if r := recordOf(l); r != v.rec || v.seenAt.IsZero() {
		v.rec, v.seenAt = r, time.Now()
	}
	if now := leaderOf(v.key, l); now != v.leader {
		v.leader = now
		v.s.metrics.LeaderChanged()
		v.Publish(primitives.LeaderChanged{Key: now.Key, Value: now.Value, Token: now.FencingToken})
		v.observers.Publish(now)
	}
	if h := v.Held(); h != nil && !h.Releasing() && !v.mine(l, h) {
		v.Lose(v.KeyDeleted(v.key), metrics.CauseKeyDeleted)
	}
	if v.orphan != 0 && n > v.orphan {
		if tok, ok := termOf(l); ok && tok == v.orphan && holderOf(l) == v.s.id {
			v.s.post(v.resignOrphan)
		} else {
			v.orphan = 0
		}
	}
	if c := v.camp; c != nil {
		// A free or vanished Lease is tried at once; a held one when its
		// holder's lease duration has passed since its record last changed.
		c.wakeAt = time.Now()
		if h := holderOf(l); h != "" && h != v.s.id {
			c.wakeAt = v.seenAt.Add(time.Duration(v.rec.duration) * time.Second)
		}
		if !c.recordRetry.IsZero() && c.recordRetry.Before(c.wakeAt) {
			c.wakeAt = c.recordRetry
		}
	}
}

// read reads the Lease now, as a quorum read, with the resourceVersion the
// answer is at.
func (v *service) read(ctx context.Context) (*coordinationv1.Lease, string, error) {
	list, err := v.leases.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", v.name).String()})
	if err != nil {
		return nil, "", err
	}
	if len(list.Items) == 0 {
		return nil, list.ResourceVersion, nil
	}
	return &list.Items[0], list.Items[0].ResourceVersion, nil
}

// readUntilDone is read, cut short when the service is done: a read off
// the loop (Observe's first) must not outlive Close.
func (v *service) readUntilDone(ctx context.Context) (*coordinationv1.Lease, string, error) {
	ctx, cancel := ctxtime.WithDone(ctx, v.Done())
	defer cancel()
	return v.read(ctx)
}

// refresh reads the Lease and records what it found. Loop only.
func (v *service) refresh(ctx context.Context) error {
	l, rv, err := v.read(ctx)
	if err != nil {
		return err
	}
	v.observed(l, rv)
	return nil
}

// retryAfter is how long a waiting candidate waits before it tries again
// after a failed request.
func (v *service) retryAfter() time.Duration { return v.s.retryAfter() }

// retryAfter is how long the session waits before it tries again after a
// failed request.
func (s *Session) retryAfter() time.Duration { return max(s.ttl/20, 50*time.Millisecond) }

// try lets the waiting Campaign take the Lease if it is free or its
// holder's lease duration has passed since this candidate saw its record
// change; else the candidate waits (its record written) until the Lease
// changes or that duration passes. Loop only.
func (v *service) try() {
	c := v.camp
	if c == nil {
		return
	}
	if err := c.reply.Context().Err(); err != nil {
		v.endCampaign(err)
		return
	}
	ctx, cancel := v.s.reqCtx()
	defer cancel()
	for range 3 {
		if err := v.refresh(ctx); err != nil {
			c.wakeAt = time.Now().Add(v.retryAfter())
			return
		}
		if v.camp == nil {
			return
		}
		l := v.cur
		if l == nil {
			created, err := v.leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v.name, Namespace: v.ns}}, metav1.CreateOptions{})
			switch {
			case err == nil:
				v.observed(created, created.ResourceVersion)
			case apierrors.IsAlreadyExists(err):
			default:
				c.wakeAt = time.Now().Add(v.retryAfter())
				return
			}
			continue
		}
		holder := holderOf(l)
		if tok, ok := termOf(l); ok && holder == v.s.id && tok == c.tried {
			// A take whose answer was lost went through.
			v.grant(tok)
			return
		}
		if holder != "" && holder != v.s.id {
			if until := v.seenAt.Add(time.Duration(v.rec.duration) * time.Second); time.Now().Before(until) {
				v.wait(ctx, until)
				return
			}
		}
		tok, err := parseRV(l.ResourceVersion)
		if err != nil {
			v.endCampaign(err)
			return
		}
		c.tried = tok
		upd, err := v.leases.Update(ctx, withTerm(l, v.s.id, c.value, tok, v.s.ttl, time.Now()), metav1.UpdateOptions{})
		switch {
		case err == nil:
			v.observed(upd, upd.ResourceVersion)
			v.grant(tok)
			return
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue
		default:
			c.wakeAt = time.Now().Add(v.retryAfter())
			return
		}
	}
	c.wakeAt = time.Now()
}

// wait makes the Campaign wait until the Lease changes or until; its
// record is written first (a failed write is tried again retryAfter
// later). Loop only.
func (v *service) wait(ctx context.Context, until time.Time) {
	c := v.camp
	c.waited, c.wakeAt = true, until
	if c.record != "" {
		return
	}
	if c.recordName == "" {
		c.recordName = v.name + candidateMark + randomHex(5)
	}
	name, now := c.recordName, time.Now()
	_, err := v.leases.Create(ctx, v.newRecord(name, now), metav1.CreateOptions{})
	switch {
	case err == nil:
		c.renewed = now
	case apierrors.IsAlreadyExists(err):
		// An earlier create whose answer was lost went through (the name
		// is random, and this Campaign's alone). It carries that create's
		// renewTime: the next round renews it.
		c.renewed = time.Time{}
	default:
		v.s.log.Debug("k8sio: write candidate record", zap.String("lease", v.key), zap.Error(err))
		c.recordRetry = now.Add(v.retryAfter())
		c.wakeAt = c.recordRetry
		return
	}
	c.record, c.recordRetry = name, time.Time{}
	fctx, cancel := context.WithCancel(v.s.ctx)
	c.endRecord = cancel
	v.follow(fctx, name, func(l *coordinationv1.Lease, _ string) {
		if l == nil && v.camp == c {
			c.record = "" // gone already
			v.endCampaign(fmt.Errorf("%s: candidate record %s/%s deleted by another client: %w", v.Spec().Name, v.ns, name, primitives.ErrLost))
		}
	})
}

// grant ends the Campaign with the term of tok. If its caller gave up
// meanwhile, the term is resigned at once. Loop only.
func (v *service) grant(tok fencing.Token) {
	c := v.camp
	h := driver.Hold{Key: v.key, Created: int64(tok), Token: tok, Value: c.value, Waited: c.waited}
	v.dropCampaign(time.Now().Add(opTimeout))
	v.sweep()
	if !v.Grant(h, c.began, func(h driver.Hold) bool { return c.reply.Answer(h, nil) }) {
		ctx, cancel := v.s.reqCtx()
		defer cancel()
		if err := v.writeRelease(ctx, &h); err != nil && !errors.Is(err, errGone) {
			v.s.log.Debug("k8sio: resign a term nobody took", zap.String("lease", v.key), zap.Error(err))
			v.orphaned(tok)
		}
	}
}

// orphaned records tok as the orphan after its resign failed, and has the
// resign tried again retryAfter later. Loop only.
func (v *service) orphaned(tok fencing.Token) {
	v.orphan, v.orphanWait = tok, v.retryAfter()
	v.orphanRetry = time.Now().Add(v.orphanWait)
}

// endCampaign fails the waiting Campaign with err. Loop only.
func (v *service) endCampaign(err error) { v.endCampaignBy(err, time.Now().Add(opTimeout)) }

// endCampaignBy is endCampaign, its requests bounded by by. Loop only.
func (v *service) endCampaignBy(err error, by time.Time) {
	if c := v.camp; c != nil {
		v.dropCampaign(by)
		v.resignTried(c, by)
		c.reply.Answer(driver.Hold{}, err)
	}
}

// resignTried lets go of the term of c's last take if the Lease shows it:
// a take whose answer was lost may have gone through, and nobody holds
// that term once the Campaign has ended. The request is bounded by by too.
// Loop only.
func (v *service) resignTried(c *campaign, by time.Time) {
	if c.tried == 0 {
		return
	}
	h := driver.Hold{Key: v.key, Created: int64(c.tried), Token: c.tried}
	ctx, cancel := v.s.reqCtxBy(by)
	defer cancel()
	switch err := v.writeRelease(ctx, &h); {
	case errors.Is(err, errGone):
		// Not (yet) on the Lease: watch for it.
		v.orphan = c.tried
	case err != nil:
		v.s.log.Debug("k8sio: resign the term of a take whose answer was lost", zap.String("lease", v.key), zap.Error(err))
		v.orphaned(c.tried)
	}
}

// resignOrphan resigns the term of v.orphan if the Lease still shows it
// and the service does not hold it. A resign that fails is tried again,
// each wait twice the one before up to a third of the TTL, until it goes
// through, the Lease shows another state or the service ends. Loop only.
func (v *service) resignOrphan() {
	tok := v.orphan
	v.orphanRetry = time.Time{}
	if tok == 0 || v.Ended() {
		return
	}
	if v.camp != nil {
		// A waiting Campaign takes the Lease over itself; should it end
		// without, the resign is still due.
		v.orphanRetry = time.Now().Add(v.retryAfter())
		return
	}
	if h := v.Held(); h != nil && h.Token == tok {
		return
	}
	ctx, cancel := v.s.reqCtx()
	defer cancel()
	switch err := v.releaseOrphan(ctx, tok); {
	case err == nil:
		v.orphan = 0
	case errors.Is(err, errGone):
		// The Lease, just read, does not show the term: observed has
		// forgotten the orphan if the take can no longer land.
	default:
		v.s.log.Debug("k8sio: resign the term of a take applied after its Campaign ended", zap.String("lease", v.key), zap.Error(err))
		v.orphanWait = max(v.retryAfter(), min(2*v.orphanWait, v.s.ttl/3))
		v.orphanRetry = time.Now().Add(v.orphanWait)
	}
}

// releaseOrphan lets go of the Lease in the term of tok, the orphan, as
// writeRelease does. Loop only.
func (v *service) releaseOrphan(ctx context.Context, tok fencing.Token) error {
	h := driver.Hold{Key: v.key, Created: int64(tok), Token: tok}
	return v.writeRelease(ctx, &h)
}

// dropCampaign forgets the Campaign and deletes its record, if any, on a
// helper, trying until by (withdrawals counts it); the channel it returns
// is closed once that is done. Loop only.
func (v *service) dropCampaign(by time.Time) <-chan struct{} {
	done := make(chan struct{})
	v.dropped = done
	c := v.camp
	v.camp = nil
	if c != nil && c.endRecord != nil {
		c.endRecord()
	}
	// The record's name, if a create was sent: written, or its outcome
	// unknown.
	if c == nil || c.recordName == "" {
		close(done)
		return done
	}
	v.withdrawals.Add()
	v.s.goHelper(func() {
		defer v.withdrawals.Done()
		defer close(done)
		v.deleteRecord(c.recordName, by)
	})
	return done
}

// writeRelease lets go of the Lease in term h, as client-go lets go: nil
// once the Lease is released; errGone if it was no longer h's. Loop only.
func (v *service) writeRelease(ctx context.Context, h *driver.Hold) error {
	return v.update(ctx, h, func(l *coordinationv1.Lease) *coordinationv1.Lease { return released(l, time.Now()) })
}

// errGone says the Lease is no longer the term's.
var errGone = errors.New("k8sio: the Lease is no longer the term's")

// update writes f(cur) for the current term, reading the Lease again on a
// conflict; errGone if the Lease is no longer the term's. Loop only.
func (v *service) update(ctx context.Context, h *driver.Hold, f func(*coordinationv1.Lease) *coordinationv1.Lease) error {
	for range 3 {
		if !v.mine(v.cur, h) {
			if err := v.refresh(ctx); err != nil {
				return err
			}
			if !v.mine(v.cur, h) {
				return errGone
			}
		}
		upd, err := v.leases.Update(ctx, f(v.cur), metav1.UpdateOptions{})
		switch {
		case err == nil:
			v.observed(upd, upd.ResourceVersion)
			return nil
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// cur is stale: read the Lease again. curRV stays, so that,
			// should that read fail, no state older than cur (a watch
			// event still queued) is taken for the Lease's meanwhile.
			v.cur = nil
		default:
			return err
		}
	}
	return fmt.Errorf("%s: the Lease keeps changing", v.Spec().Name)
}

// renew renews the held Lease (sent is the round's send). A Lease that is
// no longer this term's ends the term and is not an error. Loop only.
func (v *service) renew(ctx context.Context, sent time.Time) error {
	h := v.Held()
	err := v.update(ctx, h, func(l *coordinationv1.Lease) *coordinationv1.Lease { return renewed(l, v.s.ttl, sent) })
	if errors.Is(err, errGone) {
		if h := v.Held(); h != nil && !h.Releasing() {
			v.Lose(v.KeyDeleted(v.key), metrics.CauseKeyDeleted)
		}
		return nil
	}
	return err
}

// checkValue refuses a value the Lease cannot carry as it is: over
// MaxValueSize, or not valid UTF-8 (the term's annotation is a string,
// which JSON, client-go's default encoding, carries with U+FFFD in place
// of bad bytes).
func (v *service) checkValue(what, value string) error {
	if len(value) > MaxValueSize {
		return fmt.Errorf("%s: %s: value of %d bytes, more than %d: %w", v.Spec().Name, what, len(value), MaxValueSize, ErrInvalidArgument)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("%s: %s: value %s is not valid UTF-8: %w", v.Spec().Name, what, quote.Name(value), ErrInvalidArgument)
	}
	return nil
}

// Campaign waits until this candidate holds the Lease; see the package
// doc for how it waits.
func (v *service) Campaign(ctx context.Context, value string) error {
	if err := v.checkValue("campaign", value); err != nil {
		return err
	}
	if err := v.Enter(ctx, false); err != nil {
		return err
	}
	began := time.Now()
	var r actor.Reply[driver.Hold]
	_, err := actor.Call(ctx, v.Done(), func(rep actor.Reply[driver.Hold]) bool {
		r = rep
		return v.s.mb.Post(func() {
			if err := v.Err(); err != nil {
				rep.Answer(driver.Hold{}, err)
				return
			}
			v.camp = &campaign{value: value, reply: rep, began: began, wakeAt: began}
			v.try()
		})
	})
	if err == nil {
		return nil
	}
	v.withdraw(r)
	v.Leave()
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, actor.ErrStopped) {
		if serr := v.Err(); serr != nil {
			return serr
		}
	}
	return err
}

// withdraw has the loop forget the Campaign of r (unless it ended it
// itself) and delete its record, and waits up to leaveGrace for that:
// with the API server answering, nothing of the Campaign is left once it
// returns. Otherwise the withdrawal goes on without its caller, bounded by
// opTimeout (withdrawals counts the record's delete, and Close waits for
// it). It is posted before the Campaign lets the service's next one in
// (Leave), so that it withdraws this Campaign, not that one: the loop
// runs posts in order.
func (v *service) withdraw(r actor.Reply[driver.Hold]) {
	handed := make(chan (<-chan struct{}), 1)
	if !v.s.mb.Post(func() {
		if c := v.camp; c != nil && c.reply == r {
			by := time.Now().Add(opTimeout)
			dropped := v.dropCampaign(by)
			v.resignTried(c, by)
			handed <- dropped
			return
		}
		// The loop ended the Campaign itself (one at a time per service).
		handed <- v.dropped
	}) {
		return // the loop has stopped, and ended the Campaign
	}
	grace := time.NewTimer(leaveGrace)
	defer grace.Stop()
	var dropped <-chan struct{}
	select {
	case dropped = <-handed:
	case <-grace.C:
		return
	case <-v.s.stopped:
		return
	}
	if dropped != nil {
		select {
		case <-dropped:
		case <-grace.C:
		}
	}
}

// Proclaim changes the leader's value in the Lease's annotation, keeping
// the term and its token.
func (v *service) Proclaim(ctx context.Context, value string) error {
	if err := v.checkValue("proclaim", value); err != nil {
		return err
	}
	if err := v.Usable(ctx); err != nil {
		return err
	}
	_, err := loopCall(v.s, ctx, func() (struct{}, error) {
		if err := ctx.Err(); err != nil {
			return struct{}{}, err // given up while the loop was busy: changes nothing
		}
		h, err := v.On(nil)
		if err != nil {
			return struct{}{}, err
		}
		rctx, cancel := v.s.reqCtx()
		defer cancel()
		err = v.update(rctx, v.Held(), func(l *coordinationv1.Lease) *coordinationv1.Lease { return proclaimed(l, value) })
		if errors.Is(err, errGone) {
			v.Lose(v.KeyDeleted(v.key), metrics.CauseKeyDeleted)
			return struct{}{}, fmt.Errorf("%s: proclaim: %w", v.Spec().Name, election.ErrNotLeader)
		}
		if err != nil {
			return struct{}{}, fmt.Errorf("%s: proclaim: %w", v.Spec().Name, err)
		}
		v.Update(func(hh *driver.Hold) {
			if hh.Created == h.Created {
				hh.Value = value
			}
		})
		return struct{}{}, nil
	})
	return err
}

// Resign lets go of the Lease as client-go does (no holderIdentity), so
// that a waiting candidate takes it at once.
func (v *service) Resign(ctx context.Context) error { return v.release(ctx, driver.Any) }

// ResignTerm resigns exactly term: ErrNotLeader if this candidate no
// longer leads in that term.
func (v *service) ResignTerm(ctx context.Context, term election.Leadership) error {
	return v.release(ctx, driver.CreatedAt(term.Created))
}

func (v *service) release(ctx context.Context, m driver.Match) error {
	if err := v.Usable(ctx); err != nil {
		return err
	}
	_, err := loopCall(v.s, ctx, func() (struct{}, error) {
		if err := ctx.Err(); err != nil {
			// Given up while the loop was busy (a request to an API server
			// that does not answer): the term stands, and a retry releases
			// it. A release under way when ctx ends still completes.
			return struct{}{}, err
		}
		h, err := v.BeginRelease(m)
		if err != nil {
			return struct{}{}, err
		}
		rctx, cancel := v.s.reqCtx()
		defer cancel()
		switch err := v.writeRelease(rctx, &h); {
		case err == nil:
			return struct{}{}, v.SettleRelease(h, driver.Deleted, nil)
		case errors.Is(err, errGone):
			return struct{}{}, v.SettleRelease(h, driver.Gone, nil)
		default:
			return struct{}{}, v.SettleRelease(h, driver.Failed, err)
		}
	})
	return err
}

// Leader reads the Lease and says who leads by it: see the package doc for
// a leader that is not disco's. A holder that stopped renewing is reported
// until a candidate takes the Lease.
func (v *service) Leader(ctx context.Context) (election.Leadership, error) {
	if err := v.Usable(ctx); err != nil {
		return election.Leadership{}, err
	}
	l, _, err := v.read(ctx)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return election.Leadership{}, cerr
		}
		return election.Leadership{}, fmt.Errorf("%s: leader: %w", v.Spec().Name, err)
	}
	if err := v.Err(); err != nil {
		return election.Leadership{}, err
	}
	ld := leaderOf(v.key, l)
	if ld.Key == "" {
		return ld, fmt.Errorf("%s: %w", v.Spec().Name, election.ErrNoLeader)
	}
	return ld, nil
}

// Term returns this candidate's own current term.
func (v *service) Term() (election.Leadership, bool) {
	h, ok := v.Current()
	if !ok {
		return election.Leadership{}, false
	}
	return election.Leadership{Key: h.Key, Value: h.Value, FencingToken: h.Token, LeaseID: h.LeaseID, Created: h.Created}, true
}

// Observe delivers who leads by the Lease as read when Observe is called,
// then every change the candidate sees.
func (v *service) Observe(ctx context.Context) <-chan election.Leadership {
	closed := driver.Closed[election.Leadership]
	if ctx == nil || v.Err() != nil {
		return closed()
	}
	l, rv, rerr := v.readUntilDone(ctx)
	ch, err := loopCall(v.s, ctx, func() (<-chan election.Leadership, error) {
		if v.Ended() {
			return closed(), nil
		}
		if rerr == nil {
			v.observed(l, rv)
		}
		return v.observers.Subscribe(ctx, v.leader), nil
	})
	if err != nil {
		return closed()
	}
	return ch
}

// Close resigns (or withdraws a waiting Campaign, deleting its record) and
// ends the service; with its own session, the session is closed too. Its
// requests, and the withdrawals of Campaigns that gave up still under
// way, are bounded by 5 s together, counted from when the session's loop
// takes Close up: a resign or delete that fails is tried again until
// then. Before that, the loop finishes a request it has under way, which
// an API server that does not answer holds for up to 5 s more (see the
// package doc). A second Close returns an error wrapping
// primitives.ErrClosed once the first has returned.
func (v *service) Close() error { return v.CloseOnce(v.close) }

// close is the first Close's work (see driver.Shell.CloseOnce).
func (v *service) close() error {
	err := fmt.Errorf("%s: closed: %w", v.Spec().Name, primitives.ErrClosed)
	until, lerr := loopCall(v.s, context.Background(), func() (time.Time, error) {
		until := time.Now().Add(opTimeout)
		v.s.closeAll([]*service{v}, err, until)
		return until, nil
	})
	if lerr != nil {
		until = time.Now().Add(opTimeout) // the session has ended, and the service with it
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	v.withdrawals.Wait(ctx) // the deletes of its Campaigns' records
	cancel()
	v.followers.Wait()
	if v.own {
		if err := v.s.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
			return err
		}
	}
	return nil
}

// closeStep is a resign Close makes, tried again while it fails.
type closeStep struct {
	v    *service
	what string
	f    func(context.Context) error
	done func() // after f returned nil
	err  error  // f's last error
}

// closeAll ends the services vs with err, as Close: each resigns what it
// holds, ends its waiting Campaign (its record's delete bounded by until)
// and resigns its orphan. A resign that fails is tried again, those of
// every service in turn, with growing waits, until it goes through, the
// Lease shows another term (errGone) or until has passed; every request
// is bounded by until. Loop only.
func (s *Session) closeAll(vs []*service, err error, until time.Time) {
	var steps []closeStep
	for _, v := range vs {
		if v.Ended() {
			continue
		}
		if h, herr := v.BeginRelease(driver.Any); herr == nil {
			// The release is in flight: the Lease's change is not a loss.
			steps = append(steps, closeStep{v: v, what: "k8sio: resign at close",
				f: func(ctx context.Context) error { return v.writeRelease(ctx, &h) }})
		}
		// A waiting Campaign ends first: the term of its last take, if
		// that may have landed, becomes the orphan, resigned below.
		v.endCampaignBy(err, until)
		if tok := v.orphan; tok != 0 {
			steps = append(steps, closeStep{v: v, what: "k8sio: resign the term of a take whose Campaign ended, at close",
				f: func(ctx context.Context) error { return v.releaseOrphan(ctx, tok) }, done: func() { v.orphan = 0 }})
		}
	}
	pause := ctxtime.NewBackoff(s.retryAfter(), opTimeout/5)
	for len(steps) > 0 {
		failed := steps[:0]
		for _, st := range steps {
			ctx, cancel := s.reqCtxBy(until)
			st.err = st.f(ctx)
			cancel()
			switch {
			case st.err == nil:
				if st.done != nil {
					st.done()
				}
			case !errors.Is(st.err, errGone):
				failed = append(failed, st)
			}
		}
		steps = failed
		if len(steps) == 0 {
			break
		}
		wctx, cancel := context.WithDeadline(s.ctx, until)
		waited := pause.Wait(wctx)
		cancel()
		if !waited {
			break
		}
	}
	for _, st := range steps {
		s.log.Debug(st.what, zap.String("lease", st.v.key), zap.Error(st.err))
	}
	for _, v := range vs {
		v.endLoop(err, "")
	}
}

// endLoop ends the service with err: its term ends (Released if err wraps
// primitives.ErrClosed, else Lost with cause), its waiting Campaign fails,
// its followers stop. Loop only.
func (v *service) endLoop(err error, cause string) {
	if v.Ended() {
		return
	}
	v.EndFor(err, cause)
	v.endCampaign(err)
	if v.stop != nil {
		v.stop()
	}
	delete(v.s.services, v)
	v.observers.Close()
	v.Finish(err)
}

var (
	_ election.Service           = (*service)(nil)
	_ election.TermResigner      = (*service)(nil)
	_ primitives.SuspendCanceler = (*service)(nil)
)
