package redisio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// service is every primitive: a lock, rwlock or election on one scope (a
// name), owned by one session. Its shell (driver.Shell) is the one hold at a
// time, the current grant, the events and the service's end; the service
// adds what Redis needs. Its loop-only fields belong to the session's loop.
type service struct {
	*driver.Shell
	s    *Session
	own  bool // the session was made for this service; Close closes it
	kind kind
	name string
	// maxValue is the largest election value accepted.
	maxValue int
	value    string // a lock's holds' value (WithValue)
	permits  int    // a semaphore's N
	seq      string
	queue    string
	granted  string // name/held
	rtok     string
	wake     string

	obs        *actor.Fanout[election.Leadership] // elections only
	finishOnce sync.Once

	// cleaning, while a helper takes a lost hold out of the queue, is
	// closed when it is done: the next acquisition waits for it.
	cleaning atomic.Pointer[chan struct{}]
	// busy is full while an acquisition (a party's Enter) is under way,
	// from its last look at Err to its return: what its scripts wrote in
	// Redis is then granted to the service, or withdrawn. Close, once the
	// service has ended, fills it to wait for that acquisition.
	busy chan struct{}
	// requests counts the service's requests under way on the session's
	// helpers and their withdrawals (see request and settle): Close waits
	// for them after the acquisition under way.
	requests inflight.Counter

	// Loop only.
	waiting   map[string]chan struct{}   // hold key (a party's key) -> its waiter's wake
	listeners map[chan struct{}]struct{} // a party's waits: woken by every message
	leader    election.Leadership
	leaderSeq uint64
}

// face is what Lock, RWLock, Election, Semaphore and DoubleBarrier show
// of their service beyond their own methods: the shell's user side
// (driver.Face) and Close. The shell's loop-only methods stay out of their
// method sets.
type face interface {
	driver.Face
	Close() error
}

// kind is what a service is: it decides the scripts, the token rule and
// the errors.
type kind int

const (
	kindLock      kind = iota // token: a new increment at grant
	kindElection              // token: the hold's Created
	kindRWLock                // token: a new increment (writer) or the read epoch's (reader)
	kindParty                 // a double barrier's party: no grants, no token
	kindSemaphore             // token: a new increment at grant, in a slot
)

// spec is the shell's description of a service of kind k on name, without
// its options.
func (k kind) spec(name string) driver.Spec {
	var sp driver.Spec
	switch k {
	case kindLock:
		sp = driver.Spec{Kind: "lock", NotHeld: lock.ErrNotHeld, Taken: lock.ErrLockTaken}
	case kindRWLock:
		sp = driver.Spec{Kind: "rwlock", NotHeld: rwlock.ErrNotHeld, Taken: rwlock.ErrRWLockTaken}
	case kindElection:
		sp = driver.Spec{Kind: "election", NotHeld: election.ErrNotLeader, Taken: lock.ErrLockTaken}
	case kindSemaphore:
		sp = driver.Spec{Kind: "semaphore", NotHeld: semaphore.ErrNotHeld, Taken: semaphore.ErrNoPermit}
	case kindParty:
		sp = driver.Spec{Kind: "double barrier", NotHeld: barrier.ErrNotEntered, Taken: barrier.ErrFull}
	}
	sp.Name = fmt.Sprintf("redisio: %s %q", sp.Kind, name)
	return sp
}

func newService(cli *redis.Client, name string, k kind, opts []Option) (*service, error) {
	sp := k.spec(name)
	if cli == nil {
		return nil, fmt.Errorf("redisio: %s: nil client: %w", sp.Kind, primitives.ErrInvalidArgument)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkLockValue(k, sp.Name, o); err != nil {
		return nil, err
	}
	ctx, cancel := o.construction()
	defer cancel()
	if k == kindSemaphore {
		// A user that disagrees on N is refused before it writes anything.
		if err := checkPermits(ctx, cli, name, o.permits); err != nil {
			return nil, err
		}
	}
	s, own := o.session, false
	if s == nil {
		if s, err = newSession(ctx, cli, o); err != nil {
			return nil, err
		}
		own = true
	} else if s.cli != cli {
		return nil, fmt.Errorf("%s: the session runs on another client: %w", sp.Name, primitives.ErrInvalidArgument)
	}
	sp.CancelOnSuspend, sp.Metrics = o.CancelOnSuspend, o.Metrics
	if sp.Metrics == nil {
		sp.Metrics = s.metrics
	}
	var v *service
	if k == kindElection {
		// An election follows its leader while someone listens: its
		// subscriptions (the shell joins them) and its observations.
		sp.Listeners = driver.NewListeners(func() { s.mb.Post(func() { v.followLoop() }) })
	}
	v = &service{
		Shell: driver.NewShell(sp),
		s:     s, own: own, kind: k, name: name, maxValue: o.maxValue, value: o.value, permits: o.permits,
		seq: name + "/seq", queue: name + "/queue", granted: name + "/held", rtok: name + "/rtok", wake: name + "/wake",
		waiting: map[string]chan struct{}{}, listeners: map[chan struct{}]struct{}{},
		busy: make(chan struct{}, 1),
	}
	if k == kindParty {
		v.queue, v.granted, v.wake = name+"/dbarrier.parties", name+"/dbarrier", name+"/dbarrier.wake"
	}
	if k == kindElection {
		v.obs = actor.NewFanout(func(election.Leadership) bool { return true })
	}
	if v.onNameChannel() {
		if err := s.subscribe(ctx, v.wake); err != nil {
			v.finish(time.Now().Add(v.s.ttl))
			return nil, err
		}
	}
	if _, err := loopCall(s, ctx, func() (struct{}, error) {
		if s.ended {
			return struct{}{}, s.Err()
		}
		s.services[v] = struct{}{}
		if s.clock.Suspended() {
			v.Suspend(s.clock.Deadline()) // a grant while suspended is told at once
		}
		return struct{}{}, nil
	}); err != nil {
		v.finish(time.Now().Add(v.s.ttl))
		return nil, err
	}
	return v, nil
}

func (v *service) errf(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{v.Spec().Name}, args...)...)
}

func (v *service) ref(key string) holdRef {
	r := holdRef{queue: v.queue, granted: v.granted, key: key, wake: v.wake, seq: v.seq}
	switch v.kind {
	case kindLock:
		r.handoff = "lock"
	case kindElection:
		r.handoff = "election"
	case kindParty:
		r.party = true
	}
	return r
}

// recheck is how often a waiter, and an election's watcher, look again
// when no wake message came: the bound on a missed message or on a dead
// holder whose key expired without anyone publishing.
func (v *service) recheck() time.Duration {
	return min(max(v.s.ttl/4, 50*time.Millisecond), time.Second)
}

// nextLook returns the wait before a waiter's next timed look, place its
// hold's index in the queue at its last look (0 if unknown): a random half
// to all of the re-check interval times lookSpread(place), drawn afresh
// each time, so that waiters queued together (a fleet's candidates,
// started at once) do not all look again in the same instant.
func (v *service) nextLook(place int64) time.Duration {
	return ctxtime.Jitter(v.recheck()*time.Duration(lookSpread(place)), 0.5)
}

// lookSpread is how many re-check intervals a waiter at place in its
// queue (the holds ahead of it) waits between timed looks: one with fewer
// than 8 ahead (the waiters a release or an expiry is about to reach), up
// to 4 further back. A handoff wakes the next waiter alone, so the looks of waiters
// far back only bound a missed wake message; spread out, a queue of a
// thousand waiters makes a quarter of the looks, and a waiter that was
// far back at its last look and missed its wake message holds within up
// to four intervals.
func lookSpread(place int64) int64 {
	return min(1+max(place, 0)/8, 4)
}

// Close ends the service at once (Released for its hold, its waiters
// failing, its subscriptions closed, ErrClosed after), then deletes its
// keys in Redis, so that others proceed before Close returns. An
// acquisition under way, whose script may have queued or granted a hold
// that the service does not know of yet, ends with ErrClosed and
// withdraws that hold before Close returns: once Close returns nothing of
// the service is left in Redis, on a session that lives on too.
//
// Close returns within its session's TTL (WithTTL, DefaultTTL by
// default; the shared session's with WithSession), whatever the client's
// timeouts: one deadline, the TTL after the call, bounds all it waits
// for, closing the service's own session included (see Session.Close).
// If Redis does not answer by then, Close gives up on what is not done,
// ends the service all the same, and returns an error wrapping
// context.DeadlineExceeded that says what it gave up on; what it left in
// Redis expires with the TTL. A second Close returns an error wrapping
// primitives.ErrClosed once the first Close has returned.
func (v *service) Close() error { return v.CloseOnce(v.close) }

// close is the first Close's work (see driver.Shell.CloseOnce).
func (v *service) close() error {
	deadline := time.Now().Add(v.s.ttl)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if v.own {
		// The session ends with the service: its own requests (its
		// refreshes, its helpers') end by the deadline too.
		v.s.limit(deadline)
	}
	// The loop never waits on Redis: it answers at once.
	refs, err := loopCall(v.s, context.Background(), func() ([]holdRef, error) {
		if v.Ended() {
			return nil, v.Err()
		}
		return v.endLoop(v.errf("%w", primitives.ErrClosed), ""), nil
	})
	var undone []string
	if err == nil {
		// The acquisition under way ends first: a party's Enter may keep
		// its key (in a complete round) as the service ends, and Close
		// deletes it then.
		if !v.awaitAcquisition(ctx) {
			undone = append(undone, "an acquisition under way")
		} else if !v.requests.Wait(ctx) {
			undone = append(undone, "the withdrawal of what a request under way wrote")
		}
		for _, r := range refs {
			if ctx.Err() != nil {
				undone = append(undone, "the release of "+r.key)
				continue
			}
			if _, err := v.s.releaseOwn(ctx, nil, r, deadline); err != nil {
				v.s.log.Debug("redisio: release at Close", zap.String("key", r.key), zap.Error(err))
				if pastDeadline(ctx, err) {
					undone = append(undone, "the release of "+r.key)
				}
			}
		}
	}
	lost, serr := v.finish(deadline)
	if errors.Is(err, primitives.ErrClosed) {
		return err
	}
	if err == nil && lost {
		// Lost while Close waited (for a request under way, say): its
		// keys expire with it rather than being deleted.
		undone = append(undone, "the deletes (the session was lost meanwhile)")
	}
	var gerr error
	if len(undone) > 0 {
		gerr = v.errf("close: %w", gaveUp(v.s.ttl, undone))
	}
	return errors.Join(gerr, serr)
}

// beginAcquisition marks an acquisition under way (see busy); false if the
// service ended, which the caller then reports (Err). endAcquisition
// marks its end.
func (v *service) beginAcquisition() bool {
	select {
	case v.busy <- struct{}{}:
	case <-v.Done():
		return false
	}
	if v.Err() != nil {
		v.endAcquisition()
		return false
	}
	return true
}

func (v *service) endAcquisition() { <-v.busy }

// awaitAcquisition waits, once the service has ended, for the acquisition
// under way, if any, to return, and keeps any other from starting: it
// fails at Err after beginAcquisition. Bounded by ctx (Close's deadline):
// false if ctx ended first.
func (v *service) awaitAcquisition(ctx context.Context) bool {
	select {
	case v.busy <- struct{}{}:
		return true
	case <-ctx.Done():
		v.s.log.Warn("redisio: Close gave up waiting for an acquisition under way", zap.String("name", v.name))
		return false
	}
}

// onNameChannel reports whether the service listens on its name's channel
// for as long as it lives: a double barrier's party, which waits for its
// round. An election's session listens on its name's channel only while
// its leader watch runs (see leaderWatch), and a lock's, an rwlock's, a
// semaphore's and an election's waiters are woken on their session's own
// channel alone, so that a release's message reaches only the session
// whose waiter it names.
func (v *service) onNameChannel() bool {
	return v.kind == kindParty
}

// finish drops the service's channel subscription and, if the session
// was its own, closes the session by deadline, returning what that Close
// returned if it gave up; lost reports that the session was lost before
// it could close it (Redis not answering).
func (v *service) finish(deadline time.Time) (lost bool, err error) {
	v.finishOnce.Do(func() {
		if v.onNameChannel() {
			v.s.unsubscribe(v.wake)
		}
		if v.own {
			if serr := v.s.closeBy(deadline); errors.Is(serr, context.DeadlineExceeded) {
				err = serr
			}
			lost = errors.Is(v.s.Err(), primitives.ErrLost)
		}
	})
	return lost, err
}

// endLoop ends the service with err, which wraps primitives.ErrClosed
// (Released for its hold) or primitives.ErrLost (Lost, cause a
// metrics.Cause): its waiters fail, its subscriptions close. It returns
// the keys to delete in Redis. Loop only.
func (v *service) endLoop(err error, cause string) []holdRef {
	if v.Ended() {
		return nil
	}
	var refs []holdRef
	if h, ok := v.EndFor(err, cause); ok {
		refs = append(refs, v.ref(h.Key))
	}
	for k := range v.waiting {
		refs = append(refs, v.ref(k))
	}
	clear(v.waiting)
	v.Finish(err)
	if v.obs != nil {
		v.obs.Close()
	}
	if v.kind == kindElection {
		v.s.unwatchLeader(v)
	}
	delete(v.s.services, v)
	return refs
}
