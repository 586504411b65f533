package faultsuite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// kind is the primitive a round's clients use.
type kind int

const (
	kindLock kind = iota
	kindRWLock
	kindElection
	numKinds
)

func (k kind) String() string { return [...]string{"lock", "rwlock", "election"}[k] }

// held is one hold as its owner knows it.
type held struct {
	token int64
	key   string
	lease int64
	write bool // writes the register; readers read it
	lg    lock.Grant
	rg    rwlock.Grant
}

// owner is the one interface a worker needs of a primitive.
type owner interface {
	acquire(ctx context.Context, rng *rand.Rand) (held, error)
	release(ctx context.Context, h held, rng *rand.Rand) error
	done() <-chan struct{}
	subscribe(ctx context.Context) <-chan primitives.Event
	close() error
}

type lockOwner struct{ s lock.Service }

func (o lockOwner) acquire(ctx context.Context, _ *rand.Rand) (held, error) {
	g, err := o.s.Lock(ctx)
	return held{token: int64(g.Token()), key: g.Key, lease: g.LeaseID, write: true, lg: g}, err
}

func (o lockOwner) release(ctx context.Context, h held, rng *rand.Rand) error {
	if rng.IntN(2) == 0 {
		return o.s.Unlock(ctx)
	}
	return o.s.Release(ctx, h.lg)
}

func (o lockOwner) done() <-chan struct{}                                 { return o.s.Done() }
func (o lockOwner) subscribe(ctx context.Context) <-chan primitives.Event { return o.s.Subscribe(ctx) }
func (o lockOwner) close() error                                          { return o.s.Close() }

type rwOwner struct{ s rwlock.Service }

func (o rwOwner) acquire(ctx context.Context, rng *rand.Rand) (held, error) {
	var g rwlock.Grant
	var err error
	if rng.IntN(3) == 0 {
		g, err = o.s.Lock(ctx)
	} else {
		g, err = o.s.RLock(ctx)
	}
	return held{token: int64(g.Token()), key: g.Key, lease: g.LeaseID, write: g.Mode == rwlock.Write, rg: g}, err
}

func (o rwOwner) release(ctx context.Context, h held, rng *rand.Rand) error {
	switch {
	case rng.IntN(2) == 0:
		return o.s.Release(ctx, h.rg)
	case h.write:
		return o.s.Unlock(ctx)
	default:
		return o.s.RUnlock(ctx)
	}
}

func (o rwOwner) done() <-chan struct{}                                 { return o.s.Done() }
func (o rwOwner) subscribe(ctx context.Context) <-chan primitives.Event { return o.s.Subscribe(ctx) }
func (o rwOwner) close() error                                          { return o.s.Close() }

type electionOwner struct {
	s    election.Service
	name string
}

// errTermEnded: Campaign returned, but the term had already ended when the
// worker asked for its token.
var errTermEnded = errors.New("term ended before its token was read")

func (o electionOwner) acquire(ctx context.Context, _ *rand.Rand) (held, error) {
	if err := o.s.Campaign(ctx, o.name); err != nil {
		return held{}, err
	}
	l, ok := o.s.Term()
	if !ok {
		return held{}, errTermEnded
	}
	return held{token: int64(l.Token()), key: l.Key, lease: l.LeaseID, write: true}, nil
}

func (o electionOwner) release(ctx context.Context, _ held, _ *rand.Rand) error {
	return o.s.Resign(ctx)
}

func (o electionOwner) done() <-chan struct{} { return o.s.Done() }
func (o electionOwner) subscribe(ctx context.Context) <-chan primitives.Event {
	return o.s.Subscribe(ctx)
}
func (o electionOwner) close() error { return o.s.Close() }

// incarnation is one life of a worker: a session and a primitive on it,
// with a record of the events its subscription delivered.
type incarnation struct {
	sess    Session
	p       owner
	cancel  context.CancelFunc
	drained chan struct{}

	mu       sync.Mutex
	lost     map[holdID]bool
	released map[holdID]bool
}

// holdID names one hold: a service reuses its key name for its successive
// holds, each with a new token.
type holdID struct {
	key   string
	token int64
}

func (inc *incarnation) sawLost(key string, token int64) bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return inc.lost[holdID{key, token}]
}

func (inc *incarnation) sawReleased(key string, token int64) bool {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	return inc.released[holdID{key, token}]
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// victim is a hold the nemesis seized: the worker keeps acting on it, as a
// zombie, until the nemesis heals the fault, and a few times after.
type victim struct {
	w      *worker
	inc    *incarnation
	h      held
	healed chan struct{} // closed by the nemesis
	ended  chan struct{} // closed by the worker once it has released the hold
	stale  atomic.Int64  // requests rejected as stale
	tries  atomic.Int64  // requests attempted after seizure
}

// Zombie limits: after the fault heals, a victim makes zombieAfter more
// requests; it never makes more than zombieMax in all.
const (
	zombieAfter = 3
	zombieMax   = 200
)

// worker is one client: its own connection, reaching one site only, and a
// succession of incarnations.
type worker struct {
	r      *round
	id     int
	site   int
	cli    Client
	rng    *rand.Rand
	seq    int
	frozen atomic.Pointer[chan struct{}] // the application is paused until closed
}

func (w *worker) run(stop context.Context) {
	for stop.Err() == nil {
		inc, err := w.newIncarnation()
		if err != nil {
			w.r.count(func(s *stats) { s.sessionErrors++ })
			pace(stop, 100*time.Millisecond)
			continue
		}
		w.live(stop, inc)
		w.r.closeIncarnation(inc)
	}
}

func (w *worker) newIncarnation() (*incarnation, error) {
	sess, err := w.cli.NewSession(w.r.ttl)
	if err != nil {
		return nil, err
	}
	inc := &incarnation{sess: sess, drained: make(chan struct{}), lost: map[holdID]bool{}, released: map[holdID]bool{}}
	switch w.r.kind {
	case kindLock:
		var s lock.Service
		if s, err = sess.NewLock(w.r.prefix); err == nil {
			inc.p = lockOwner{s}
		}
	case kindRWLock:
		var s rwlock.Service
		if s, err = sess.NewRWLock(w.r.prefix); err == nil {
			inc.p = rwOwner{s}
		}
	case kindElection:
		var s election.Service
		if s, err = sess.NewElection(w.r.prefix); err == nil {
			inc.p = electionOwner{s, fmt.Sprintf("worker-%d", w.id)}
		}
	}
	if err != nil {
		sess.Close()
		return nil, err
	}
	var ctx context.Context
	ctx, inc.cancel = context.WithCancel(context.Background())
	events := inc.p.subscribe(ctx)
	go func() {
		defer close(inc.drained)
		for ev := range events {
			inc.mu.Lock()
			switch e := ev.(type) {
			case primitives.Lost:
				inc.lost[holdID{e.Key, int64(e.Token)}] = true
			case primitives.Released:
				inc.released[holdID{e.Key, int64(e.Token)}] = true
			}
			inc.mu.Unlock()
		}
	}()
	return inc, nil
}

// live acquires, uses and releases holds until the session ends or stop.
func (w *worker) live(stop context.Context, inc *incarnation) {
	for stop.Err() == nil {
		wasDone := isDone(inc.p.done())
		h, err := inc.p.acquire(stop, w.rng)
		if wasDone && err == nil {
			w.r.fail("worker %d: an acquisition succeeded after the service was done", w.id)
		}
		if err != nil {
			switch {
			case stop.Err() != nil:
				return
			case isDone(inc.p.done()):
				return // the session ended: a new incarnation
			case errors.Is(err, errTermEnded):
				_ = inc.p.release(stop, h, w.rng)
				continue
			}
			w.r.count(func(s *stats) { s.acquireErrors++ })
			pace(stop, 50*time.Millisecond)
			continue
		}
		w.r.acquired(w.id, h.token)
		v := w.use(inc, h)
		w.release(inc, h, v)
	}
}

// use makes a few requests with the hold's token. If the nemesis seizes the
// hold meanwhile, it goes on as a zombie: it keeps the token and keeps
// writing, whatever disco says, until the fault heals and a few times after.
func (w *worker) use(inc *incarnation, h held) *victim {
	var v *victim
	n := 2 + w.rng.IntN(4)
	after := 0
	for i := 0; ; i++ {
		if from := w.r.seizeFrom.Load(); v == nil && (from < 0 || from == int64(w.site)) && w.r.seizing.CompareAndSwap(true, false) {
			v = &victim{w: w, inc: inc, h: h, healed: make(chan struct{}), ended: make(chan struct{})}
			w.r.seized <- v
		}
		if v == nil && i >= n {
			return nil
		}
		if v != nil {
			if isDone(v.healed) {
				if after == zombieAfter {
					return v
				}
				after++
			}
			if v.tries.Load() >= zombieMax {
				return v
			}
		}
		if p := w.frozen.Load(); p != nil {
			<-*p // paused with its session, as by a long GC pause
		}
		out := w.request(h)
		if v != nil {
			v.tries.Add(1)
			if out == stale {
				v.stale.Add(1)
			}
		}
		d := 5 * time.Millisecond
		if v != nil {
			d = 50 * time.Millisecond // a zombie writes at a bounded rate
		}
		pace(context.Background(), d+time.Duration(w.rng.IntN(10))*time.Millisecond)
	}
}

// request writes (or, for a reader, reads) the register with the token.
func (w *worker) request(h held) outcome {
	if !h.write {
		o := w.r.http.do(w.id, false, "", h.token)
		w.r.record(&o, nil)
		return o.out
	}
	w.seq++
	value := fmt.Sprintf("w%d.%d", w.id, w.seq)
	o := w.r.http.do(w.id, true, value, h.token)
	s := w.r.sql.write(w.id, value, h.token)
	w.r.record(&o, &s)
	return o.out
}

// release ends a hold and checks that an owner whose hold ended
// involuntarily knew before its call returned.
func (w *worker) release(inc *incarnation, h held, v *victim) {
	if v != nil {
		defer close(v.ended)
	}
	var err error
	for try := 0; try < 10; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = inc.p.release(ctx, h, w.rng)
		cancel()
		if err == nil || isDone(inc.p.done()) || errors.Is(err, lock.ErrNotHeld) ||
			errors.Is(err, rwlock.ErrNotHeld) || errors.Is(err, election.ErrNotLeader) {
			break
		}
	}
	done := isDone(inc.p.done()) // right after the call returned
	if err == nil {
		if v != nil {
			w.r.fail("worker %d: release of seized hold %s (token %d) succeeded after its lease expired", w.id, h.key, h.token)
		}
		w.r.count(func(s *stats) { s.released++ })
		return
	}
	w.r.count(func(s *stats) { s.lostHolds++ })
	if v != nil {
		w.r.count(func(s *stats) { s.zombiesChecked++ })
		if !done {
			w.r.fail("worker %d: seized hold %s (token %d): release failed (%v) but Done was not closed when it returned", w.id, h.key, h.token, err)
		}
	}
	if !done && !eventually(2*time.Second, func() bool { return inc.sawLost(h.key, h.token) }) {
		w.r.fail("worker %d: hold %s (token %d) ended (%v) but neither Done nor Lost told the owner", w.id, h.key, h.token, err)
	}
	if inc.sawReleased(h.key, h.token) {
		w.r.fail("worker %d: hold %s (token %d) reported Released, but its release failed: %v", w.id, h.key, h.token, err)
	}
	if done {
		// Every later call fails too.
		if _, err := inc.p.acquire(context.Background(), w.rng); err == nil {
			w.r.fail("worker %d: acquired on a done service", w.id)
		}
		if !errors.Is(inc.sess.Err(), primitives.ErrLost) && !errors.Is(inc.sess.Err(), primitives.ErrClosed) {
			w.r.fail("worker %d: session Err after loss: %v", w.id, inc.sess.Err())
		}
	}
}

// pace waits d, or until ctx ends: it sets the workload's rate and
// synchronises nothing.
func pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
