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
		return fmt.Errorf("k8sio: new election %s/%s: %w", driver.QuoteName(namespace), driver.QuoteName(name), err)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fail(err)
	}
	if driver.IsNil(cs) {
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
		ctx, cancel := context.WithCancel(s.ctx)
		v.stop = cancel
		v.follow(ctx, name, func(l *coordinationv1.Lease, rv string) {
			v.observed(l, rv)
			if c := v.camp; c != nil && c.trying {
				c.recheck = true
			}
		})
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
	// withdrawals counts the deletes of its Campaigns' records, and the
	// resigns of terms nobody holds, under way, so that Close waits for
	// those a Campaign that gave up left to go on without it.
	withdrawals driver.Inflight

	// Loop only.
	stop    context.CancelFunc // stops the followers
	cur     *coordinationv1.Lease
	curRV   fencing.Token // the resourceVersion cur is known at (0: nothing known; cur nil: absent, or stale after a conflict)
	rec     record        // cur's record, and when it was first seen
	seenAt  time.Time
	leader  election.Leadership // the latest told to observers
	camp    *campaign
	dropped *driver.Inflight // the last Campaign's leftovers under way: see withdrawCampaign
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
	orphaning   bool // a resign of the orphan is asked for

	// The service's sequences of requests run one at a time (serially):
	// busy while one is under way, queue those asked for since.
	busy  bool
	queue []func()
	// clock is the liveness of the term whose Created is clockOf, counted
	// from the sends of its Lease's acknowledged renewals; nextRenew is
	// when the Lease is renewed next, renewing while a renewal is asked
	// for.
	clock     driver.Clock
	clockOf   int64
	nextRenew time.Time
	renewing  bool
	// closing is set once Close (the service's or its session's) has
	// begun: new requests fail with closeErr, and every request is
	// bounded by closeBy. onClosed runs once its resigns are over.
	closing  bool
	closeErr error
	closeBy  time.Time
	onClosed []func()
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
	// creating is closed once the last create of the record sent has
	// returned: the record's delete waits for it.
	creating <-chan struct{}
	// trying is set while a try is asked for or under way; recheck if the
	// watch saw the Lease change meanwhile.
	trying, recheck bool
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

// mine reports whether l is held in the term h. Any goroutine: it reads
// only the session's identity, which never changes (writeTerm calls it
// off the loop).
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
		c.wakeAt = v.wakeTime(c)
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
	ctx, cancel := driver.WithDone(ctx, v.Done())
	defer cancel()
	return v.read(ctx)
}

// retryAfter is how long a waiting candidate waits before it tries again
// after a failed request.
func (v *service) retryAfter() time.Duration { return v.s.retryAfter() }

// retryAfter is how long the session waits before it tries again after a
// failed request.
func (s *Session) retryAfter() time.Duration { return max(s.ttl/20, 50*time.Millisecond) }

// reqCtx bounds a request of the service as reqCtxOn does, by the term's
// clock while the service holds the Lease, else by the session's; while
// the service closes, also by its Close's bound. Loop only.
func (v *service) reqCtx(by time.Time) (context.Context, context.CancelFunc) {
	if v.closing && (by.IsZero() || v.closeBy.Before(by)) {
		by = v.closeBy
	}
	c := &v.s.clock
	if v.termClocked() {
		c = &v.clock
	}
	return v.s.reqCtxOn(c, by)
}

// wakeTime is when the waiting Campaign c tries next by the Lease as last
// seen: at once if it is free or gone; when its holder's lease duration
// has passed since its record last changed if it is held; no later than a
// failed create of c's record is due again. Loop only.
func (v *service) wakeTime(c *campaign) time.Time {
	at := time.Now()
	if h := holderOf(v.cur); h != "" && h != v.s.id {
		at = v.seenAt.Add(time.Duration(v.rec.duration) * time.Second)
	}
	if !c.recordRetry.IsZero() && c.recordRetry.Before(at) {
		at = c.recordRetry
	}
	return at
}

// try has the waiting Campaign try, serially: it takes the Lease if it is
// free or its holder's lease duration has passed since this candidate saw
// its record change; else the candidate waits (its record written) until
// the Lease changes or that duration passes. One try at a time. Loop only.
func (v *service) try() {
	c := v.camp
	if c == nil || c.trying {
		return
	}
	c.trying = true
	v.serially(func() {
		if v.camp != c || v.gone() != nil {
			c.trying = false
			v.finished()
			return
		}
		if err := c.reply.Context().Err(); err != nil {
			c.trying = false
			v.endCampaign(err)
			v.finished()
			return
		}
		ctx, cancel := v.reqCtx(time.Time{})
		v.tryStep(c, ctx, func() {
			cancel()
			c.trying = false
			if c.recheck && v.camp == c {
				// The Lease changed while the try was under way.
				if at := v.wakeTime(c); at.Before(c.wakeAt) {
					c.wakeAt = at
				}
			}
			c.recheck = false
			v.finished()
		}, 3)
	})
}

// tryStep is one step of a try of the Campaign c: it reads the Lease and
// acts on what it finds, with requests of its own, and calls end once the
// try is over (having set c.wakeAt). left is how many more steps a try
// may take. Loop only.
func (v *service) tryStep(c *campaign, ctx context.Context, end func(), left int) {
	if left == 0 {
		c.wakeAt = time.Now()
		end()
		return
	}
	retry := func() {
		if v.camp == c {
			c.wakeAt = time.Now().Add(v.retryAfter())
		}
		end()
	}
	request(v.s, ctx, nil, func(ctx context.Context) (seen, error) {
		l, rv, err := v.read(ctx)
		return seen{l: l, rv: rv}, err
	}, func(r seen, err error) {
		if err != nil {
			retry()
			return
		}
		v.observed(r.l, r.rv)
		if v.camp != c || v.gone() != nil {
			end()
			return
		}
		l := v.cur
		if l == nil {
			request(v.s, ctx, nil, func(ctx context.Context) (*coordinationv1.Lease, error) {
				return v.leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: v.name, Namespace: v.ns}}, metav1.CreateOptions{})
			}, func(created *coordinationv1.Lease, err error) {
				switch {
				case err == nil:
					v.observed(created, created.ResourceVersion)
				case apierrors.IsAlreadyExists(err):
				default:
					retry()
					return
				}
				if v.camp != c || v.gone() != nil {
					end()
					return
				}
				v.tryStep(c, ctx, end, left-1)
			}, nil)
			return
		}
		holder := holderOf(l)
		if tok, ok := termOf(l); ok && holder == v.s.id && tok == c.tried {
			// A take whose answer was lost went through; its send is
			// unknown, the Lease's renewTime stands for it.
			sent := time.Now()
			if rt := l.Spec.RenewTime; rt != nil && rt.Time.Before(sent) {
				sent = rt.Time
			}
			v.grant(c, tok, sent)
			end()
			return
		}
		if holder != "" && holder != v.s.id {
			if until := v.seenAt.Add(time.Duration(v.rec.duration) * time.Second); time.Now().Before(until) {
				v.wait(c, ctx, until, end)
				return
			}
		}
		tok, err := parseRV(l.ResourceVersion)
		if err != nil {
			v.endCampaign(err)
			end()
			return
		}
		c.tried = tok
		sent := time.Now()
		take := withTerm(l, v.s.id, c.value, tok, v.s.ttl, sent)
		request(v.s, ctx, nil, func(ctx context.Context) (*coordinationv1.Lease, error) {
			return v.leases.Update(ctx, take, metav1.UpdateOptions{})
		}, func(upd *coordinationv1.Lease, err error) {
			switch {
			case err == nil:
				v.observed(upd, upd.ResourceVersion)
				v.s.confirmed(sent, time.Now(), time.Time{})
				if v.camp == c {
					v.grant(c, tok, sent)
				}
				// Else the Campaign ended while its take was under way:
				// its withdrawal resigns the term (resignTried, after
				// this).
				end()
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
				if v.camp != c || v.gone() != nil {
					end()
					return
				}
				v.tryStep(c, ctx, end, left-1)
			default:
				retry()
			}
		}, nil)
	}, nil)
}

// wait makes the Campaign c wait until the Lease changes or until; its
// record is written first (a failed write is tried again retryAfter
// later), and end called once that is done. Loop only.
func (v *service) wait(c *campaign, ctx context.Context, until time.Time, end func()) {
	c.waited, c.wakeAt = true, until
	if c.record != "" {
		end()
		return
	}
	if c.recordName == "" {
		c.recordName = v.name + candidateMark + randomHex(5)
	}
	name, now := c.recordName, time.Now()
	rec := v.newRecord(name, now)
	created := make(chan struct{})
	c.creating = created
	request(v.s, ctx, nil, func(ctx context.Context) (struct{}, error) {
		defer close(created) // a delete of the record waits for this
		_, err := v.leases.Create(ctx, rec, metav1.CreateOptions{})
		return struct{}{}, err
	}, func(_ struct{}, err error) {
		if v.camp != c {
			end() // dropCampaign deletes the record, after this create
			return
		}
		switch {
		case err == nil:
			c.renewed = now
		case apierrors.IsAlreadyExists(err):
			// An earlier create whose answer was lost went through (the
			// name is random, and this Campaign's alone). It carries that
			// create's renewTime: the next round renews it.
			c.renewed = time.Time{}
		default:
			v.s.log.Debug("k8sio: write candidate record", zap.String("lease", v.key), zap.Error(err))
			c.recordRetry = now.Add(v.retryAfter())
			c.wakeAt = c.recordRetry
			end()
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
		end()
	}, nil)
}

// grant ends the Campaign c with the term of tok, whose take was sent at
// sent: the term's clock starts then. If its caller gave up meanwhile,
// the term is resigned at once. Loop only.
func (v *service) grant(c *campaign, tok fencing.Token, sent time.Time) {
	h := driver.Hold{Key: v.key, Created: int64(tok), Token: tok, Value: c.value, Waited: c.waited}
	lo := v.dropCampaign(time.Now().Add(opTimeout))
	v.sweep()
	v.Resume() // forget an earlier term's suspension: this term has a clock of its own
	v.clock, v.clockOf = driver.NewClock(sent, v.s.ttl, v.s.clock.SuspendAfter()), h.Created
	v.nextRenew, v.renewing = sent.Add(v.clock.RenewEvery()), false
	if !v.Grant(h, c.began, func(h driver.Hold) bool { return c.reply.Answer(h, nil) }) {
		v.resignUnheld(func() fencing.Token { return tok }, time.Now().Add(opTimeout), lo)
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
		v.withdrawCampaign(c, by)
		c.reply.Answer(driver.Hold{}, err)
	}
}

// withdrawCampaign forgets the Campaign c, deletes its record and resigns
// the term of its last take if the Lease shows it (a take whose answer
// was lost, or still under way, may go through, and nobody holds that
// term once the Campaign has ended), each bounded by by; the counter it
// returns counts what of that is under way. Loop only.
func (v *service) withdrawCampaign(c *campaign, by time.Time) *driver.Inflight {
	lo := v.dropCampaign(by)
	// c.tried as it stands once the requests before this one are over: a
	// take under way when the Campaign ended has set it.
	v.resignUnheld(func() fencing.Token { return c.tried }, by, lo)
	return lo
}

// resignUnheld resigns, serially, the term of tok(), nobody's, read when
// its turn comes (0: none), bounded by by; lo and withdrawals count it.
// Loop only.
func (v *service) resignUnheld(tok func() fencing.Token, by time.Time, lo *driver.Inflight) {
	lo.Add()
	v.withdrawals.Add()
	done := func() {
		v.withdrawals.Done()
		lo.Done()
	}
	v.serially(func() {
		t := tok()
		if t == 0 || v.Err() != nil { // ended: nothing is written
			done()
			v.finished()
			return
		}
		v.resignTerm(t, by, done)
	})
}

// resignTerm lets go of the term of tok, which nobody holds, if the Lease
// shows it, bounded by by; a term the Lease does not show (yet) becomes
// the orphan, watched for, and one whose resign failed the orphan tried
// again later. done runs once it is over, also if the loop has stopped
// meanwhile; then the sequence ends. Loop only (serially).
func (v *service) resignTerm(tok fencing.Token, by time.Time, done func()) {
	h := driver.Hold{Key: v.key, Created: int64(tok), Token: tok}
	ctx, cancel := v.reqCtx(by)
	cur := v.cur
	request(v.s, ctx, cancel, func(ctx context.Context) ([]seen, error) {
		ss, _, err := v.writeTerm(ctx, cur, h, releasedNow)
		return ss, err
	}, func(ss []seen, err error) {
		v.saw(ss)
		switch {
		case errors.Is(err, errGone):
			// Not (yet) on the Lease: watch for it.
			if v.orphan == 0 {
				v.orphan = tok
			}
		case err != nil:
			v.s.log.Debug("k8sio: resign a term nobody holds", zap.String("lease", v.key), zap.Error(err))
			v.orphaned(tok)
		}
		done()
		v.finished()
	}, done)
}

// releasedNow is the Lease l let go of now.
func releasedNow(l *coordinationv1.Lease) *coordinationv1.Lease { return released(l, time.Now()) }

// resignOrphan resigns, serially, the term of v.orphan if the Lease still
// shows it and the service does not hold it. A resign that fails is tried
// again, each wait twice the one before up to a third of the TTL, until it
// goes through, the Lease shows another state or the service ends. Loop
// only.
func (v *service) resignOrphan() {
	v.orphanRetry = time.Time{}
	if v.orphan == 0 || v.orphaning || v.gone() != nil {
		return
	}
	v.orphaning = true
	v.serially(func() {
		over := func() {
			v.orphaning = false
			v.finished()
		}
		tok := v.orphan
		if tok == 0 || v.gone() != nil {
			over()
			return
		}
		if v.camp != nil {
			// A waiting Campaign takes the Lease over itself; should it end
			// without, the resign is still due.
			v.orphanRetry = time.Now().Add(v.retryAfter())
			over()
			return
		}
		if h := v.Held(); h != nil && h.Token == tok {
			over()
			return
		}
		ctx, cancel := v.reqCtx(time.Time{})
		v.write(ctx, cancel, driver.Hold{Key: v.key, Created: int64(tok), Token: tok}, releasedNow, func(err error) {
			switch {
			case err == nil:
				if v.orphan == tok {
					v.orphan = 0
				}
			case errors.Is(err, errGone):
				// The Lease, just read, does not show the term: observed
				// has forgotten the orphan if the take can no longer land.
			default:
				v.s.log.Debug("k8sio: resign the term of a take applied after its Campaign ended", zap.String("lease", v.key), zap.Error(err))
				v.orphanWait = max(v.retryAfter(), min(2*v.orphanWait, v.s.ttl/3))
				v.orphanRetry = time.Now().Add(v.orphanWait)
			}
			over()
		})
	})
}

// dropCampaign forgets the Campaign and deletes its record, if any, on a
// helper, trying until by (withdrawals counts it), once a create of it
// under way has returned. The counter it returns, v.dropped, counts that
// delete, and the Campaign's other leftovers the caller adds to it. Loop
// only.
func (v *service) dropCampaign(by time.Time) *driver.Inflight {
	lo := new(driver.Inflight)
	v.dropped = lo
	c := v.camp
	v.camp = nil
	if c != nil && c.endRecord != nil {
		c.endRecord()
	}
	// The record's name, if a create was sent: written, or its outcome
	// unknown.
	if c == nil || c.recordName == "" {
		return lo
	}
	lo.Add()
	v.withdrawals.Add()
	name, creating := c.recordName, c.creating
	v.s.goHelper(func() {
		defer v.withdrawals.Done()
		defer lo.Done()
		v.deleteRecord(name, creating, by)
	})
	return lo
}

// errGone says the Lease is no longer the term's.
var errGone = errors.New("k8sio: the Lease is no longer the term's")

// termClocked reports whether the service holds the Lease in the term its
// clock counts for. Loop only.
func (v *service) termClocked() bool {
	h := v.Held()
	return h != nil && h.Created == v.clockOf
}

// termNext is when the term's clock or its renewal next needs the loop
// (zero: never). Loop only.
func (v *service) termNext() time.Time {
	if !v.termClocked() || v.closing {
		return time.Time{}
	}
	at := v.clock.Next()
	if !v.renewing && (at.IsZero() || v.nextRenew.Before(at)) {
		at = v.nextRenew
	}
	return at
}

// tickTerm acts on the term's clock at now (Suspended, or Lost at its
// deadline: the term ends, the service stays usable) and has the Lease
// renewed when due. Loop only.
func (v *service) tickTerm(now time.Time) {
	if !v.termClocked() {
		v.endSuspension()
		return
	}
	switch v.clock.Tick(now) {
	case driver.Suspend:
		v.s.metrics.Suspended()
		v.Suspend(v.clock.Deadline())
	case driver.Expire:
		v.expired()
		v.endSuspension()
		return
	}
	if !v.renewing && !now.Before(v.nextRenew) {
		v.renewing = true
		v.serially(v.renew)
	}
}

// endSuspension forgets the suspension of a term that has ended (lost,
// resigned, or its Lease taken), with no event: a suspension is its term's
// alone, and a service that holds nothing is not suspended, so that
// election.Supervise, which campaigns again once a suspension is over,
// does. The loop ticks after every change it makes, so a term's end is
// followed by this at once. Loop only.
func (v *service) endSuspension() {
	if _, ok := v.SuspendedUntil(); ok && v.Held() == nil {
		v.Resume() // no hold: no Resumed
	}
}

// expired ends the term whose deadline passed with Lost. Loop only.
func (v *service) expired() {
	v.Lose(fmt.Errorf("%s: no renewal of the Lease acknowledged within the TTL of %v: %w", v.Spec().Name, v.s.ttl, primitives.ErrLost), metrics.CauseLeaseExpired)
}

// renew renews the held Lease, serially: an acknowledgement moves the
// term's clock and confirms the session; a failed renewal is tried again
// a tenth of the TTL later. A Lease that is no longer this term's ends the
// term. Loop only.
func (v *service) renew() {
	if !v.termClocked() || v.gone() != nil {
		v.renewing = false
		v.finished()
		return
	}
	h, sent := *v.Held(), time.Now()
	ctx, cancel := v.reqCtx(time.Time{})
	v.write(ctx, cancel, h, func(l *coordinationv1.Lease) *coordinationv1.Lease { return renewed(l, v.s.ttl, sent) }, func(err error) {
		v.renewing = false
		defer v.finished()
		now := time.Now()
		cur := v.Held()
		same := cur != nil && cur.Created == h.Created
		switch {
		case err == nil && same: // v.clock is the term's
			v.s.confirmed(sent, now, v.clock.Deadline()) // the margin left on the Lease
		case err == nil || errors.Is(err, errGone):
			v.s.confirmed(sent, now, time.Time{}) // the server answered
		}
		if !same {
			return // the term ended meanwhile
		}
		switch {
		case errors.Is(err, errGone):
			if !cur.Releasing() {
				v.Lose(v.KeyDeleted(v.key), metrics.CauseKeyDeleted)
			}
		case err != nil:
			v.s.log.Debug("k8sio: renewal failed", zap.String("lease", v.key), zap.Error(err))
			v.nextRenew = now.Add(max(v.s.ttl/10, 50*time.Millisecond))
		default:
			v.nextRenew = sent.Add(v.clock.RenewEvery())
			switch v.clock.Renewed(sent, now, 0) {
			case driver.Resume:
				v.Resume()
			case driver.Expire:
				v.expired()
			}
		}
	})
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
		return fmt.Errorf("%s: %s: value %s is not valid UTF-8: %w", v.Spec().Name, what, driver.QuoteName(value), ErrInvalidArgument)
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
			if err := v.gone(); err != nil {
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
// itself), delete its record and resign the term of a take of it that may
// have gone through, and waits up to leaveGrace for that: with the API
// server answering, nothing of the Campaign is left once it returns.
// Otherwise the withdrawal goes on without its caller, bounded by
// opTimeout (withdrawals counts it, and Close waits for it). It is posted
// before the Campaign lets the service's next one in (Leave), so that it
// withdraws this Campaign, not that one: the loop runs posts in order.
func (v *service) withdraw(r actor.Reply[driver.Hold]) {
	handed := make(chan *driver.Inflight, 1)
	if !v.s.mb.Post(func() {
		if c := v.camp; c != nil && c.reply == r {
			handed <- v.withdrawCampaign(c, time.Now().Add(opTimeout))
			return
		}
		// The loop ended the Campaign itself (one at a time per service).
		handed <- v.dropped
	}) {
		return // the loop has stopped, and ended the Campaign
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveGrace)
	defer cancel()
	select {
	case dropped := <-handed:
		dropped.Wait(ctx) // a nil one (no Campaign dropped yet) waits for nothing
	case <-ctx.Done():
	case <-v.s.stopped:
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
	_, err := callSerially(v, ctx, func(r actor.Reply[struct{}]) {
		h, err := v.On(nil)
		if err != nil {
			r.Answer(struct{}{}, err)
			v.finished()
			return
		}
		rctx, cancel := v.reqCtx(time.Time{})
		v.write(rctx, cancel, h, func(l *coordinationv1.Lease) *coordinationv1.Lease { return proclaimed(l, value) }, func(err error) {
			defer v.finished()
			if errors.Is(err, errGone) {
				if cur := v.Held(); cur != nil && cur.Created == h.Created {
					v.Lose(v.KeyDeleted(v.key), metrics.CauseKeyDeleted)
				}
				r.Answer(struct{}{}, fmt.Errorf("%s: proclaim: %w", v.Spec().Name, election.ErrNotLeader))
				return
			}
			if err != nil {
				r.Answer(struct{}{}, fmt.Errorf("%s: proclaim: %w", v.Spec().Name, err))
				return
			}
			v.Update(func(hh *driver.Hold) {
				if hh.Created == h.Created {
					hh.Value = value
				}
			})
			r.Answer(struct{}{}, nil)
		})
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

// release resigns the term m accepts, serially: a call given up before its
// turn changes nothing (the term stands, and a retry releases it); a
// release under way when ctx ends still completes.
func (v *service) release(ctx context.Context, m driver.Match) error {
	if err := v.Usable(ctx); err != nil {
		return err
	}
	_, err := callSerially(v, ctx, func(r actor.Reply[struct{}]) {
		h, err := v.BeginRelease(m)
		if err != nil {
			r.Answer(struct{}{}, err)
			v.finished()
			return
		}
		rctx, cancel := v.reqCtx(time.Time{})
		v.write(rctx, cancel, h, releasedNow, func(err error) {
			defer v.finished()
			switch {
			case err == nil:
				r.Answer(struct{}{}, v.SettleRelease(h, driver.Deleted, nil))
			case errors.Is(err, errGone):
				r.Answer(struct{}{}, v.SettleRelease(h, driver.Gone, nil))
			default:
				r.Answer(struct{}{}, v.SettleRelease(h, driver.Failed, err))
			}
		})
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
// way, are bounded by 5 s together, counted from Close's call: a resign or
// delete that fails is tried again until then, and a request of the
// election already under way (bounded by 5 s from when it was sent) is
// finished within that bound too. A second Close returns an error
// wrapping primitives.ErrClosed once the first has returned.
func (v *service) Close() error { return v.CloseOnce(v.close) }

// close is the first Close's work (see driver.Shell.CloseOnce).
func (v *service) close() error {
	err := fmt.Errorf("%s: closed: %w", v.Spec().Name, primitives.ErrClosed)
	until := time.Now().Add(opTimeout)
	done := make(chan struct{})
	if v.s.mb.Post(func() { v.s.closeAll([]*service{v}, err, until, func() { close(done) }) }) {
		select {
		case <-done:
		case <-v.s.stopped: // the session has ended, and the service with it
		}
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

// closeAll ends the services vs with err, as Close, and calls done once
// they have: each ends its waiting Campaign (its record's delete, and the
// resign of its last take's term, bounded by until), then, serially after
// the requests of the service already asked for, resigns what it holds
// and its orphan. A resign that fails is tried again, with growing waits,
// until it goes through, the Lease shows another term (errGone) or until
// has passed; every request is bounded by until. The services' requests
// run side by side. A service already closing is waited for. Loop only.
func (s *Session) closeAll(vs []*service, err error, until time.Time, done func()) {
	left := 1
	finish := func() {
		if left--; left > 0 {
			return
		}
		for _, v := range vs {
			v.endLoop(err, "")
		}
		done()
	}
	for _, v := range vs {
		if v.Ended() {
			continue
		}
		left++
		if v.closing {
			v.onClosed = append(v.onClosed, finish)
			continue
		}
		v.closing, v.closeErr, v.closeBy = true, err, until
		v.onClosed = append(v.onClosed, finish)
		// A waiting Campaign ends first: the term of its last take, if
		// that may have landed, is resigned before what follows.
		v.endCampaignBy(err, until)
		v.serially(v.closeRequests)
	}
	finish()
}

// closeRequests resigns, at Close, the term the service holds and its
// orphan, retrying until Close's bound; then it tells those waiting for
// the service's Close. Loop only (serially).
func (v *service) closeRequests() {
	over := func() {
		fs := v.onClosed
		v.onClosed = nil
		v.finished()
		for _, f := range fs {
			f()
		}
	}
	if v.Ended() {
		over()
		return
	}
	type step struct {
		what   string
		h      driver.Hold
		orphan bool
	}
	var steps []step
	if h, herr := v.BeginRelease(driver.Any); herr == nil {
		// The release is in flight: the Lease's change is not a loss.
		steps = append(steps, step{what: "k8sio: resign at close", h: h})
	}
	orphan := v.orphan
	if orphan != 0 {
		steps = append(steps, step{what: "k8sio: resign the term of a take whose Campaign ended, at close",
			h: driver.Hold{Key: v.key, Created: int64(orphan), Token: orphan}, orphan: true})
	}
	if len(steps) == 0 {
		over()
		return
	}
	type result struct {
		saw        []seen
		orphanDone bool
	}
	ctx, cancel := v.reqCtx(v.closeBy)
	cur := v.cur
	request(v.s, ctx, cancel, func(ctx context.Context) (result, error) {
		var r result
		pause := driver.NewBackoff(v.retryAfter(), opTimeout/5)
		for {
			failed := steps[:0]
			var errs []error
			for _, st := range steps {
				ss, last, err := v.writeTerm(ctx, cur, st.h, releasedNow)
				r.saw, cur = append(r.saw, ss...), last
				switch {
				case err == nil:
					r.orphanDone = r.orphanDone || st.orphan
				case !errors.Is(err, errGone):
					failed, errs = append(failed, st), append(errs, err)
				}
			}
			steps = failed
			if len(steps) == 0 || !pause.Wait(ctx) {
				for i, st := range steps {
					v.s.log.Debug(st.what, zap.String("lease", v.key), zap.Error(errs[i]))
				}
				return r, nil
			}
		}
	}, func(r result, _ error) {
		v.saw(r.saw)
		if r.orphanDone && v.orphan == orphan {
			v.orphan = 0
		}
		over()
	}, nil)
}

// endLoop ends the service with err: its term ends (Released if err wraps
// primitives.ErrClosed, else Lost with cause), its waiting Campaign fails,
// its followers stop, and the requests asked for but not begun are
// answered with err. Loop only.
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
	if v.busy && len(v.queue) > 0 {
		// The sequence under way ends on its own; those waiting see the
		// service ended and send nothing.
		q := v.queue
		v.queue = nil
		for _, op := range q {
			v.busy = true
			op()
		}
		v.busy = true
	}
	fs := v.onClosed
	v.onClosed = nil
	for _, f := range fs {
		f()
	}
}

var (
	_ election.Service           = (*service)(nil)
	_ election.TermResigner      = (*service)(nil)
	_ primitives.SuspendCanceler = (*service)(nil)
)
