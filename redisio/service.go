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
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// service is every primitive: a lock, rwlock or election on one scope (a name),
// owned by one session. Its loop-only fields belong to the session's loop.
type service struct {
	s    *Session
	own  bool // the session was made for this service; Close closes it
	kind kind
	what string
	name string
	// maxValue is the largest election value accepted.
	maxValue int
	seq      string
	queue    string
	granted  string // name/held
	rtok     string
	wake     string
	notHeld  error
	taken    error
	cancel   bool // WithCancelOnSuspend

	fan  *actor.Fanout[primitives.Event]
	obs  *actor.Fanout[election.Leadership] // elections only
	sem  chan struct{}                      // one hold (or acquisition) at a time
	done chan struct{}

	errOnce    sync.Once
	errMu      sync.Mutex
	err        error
	finishOnce sync.Once

	term        atomic.Pointer[hold] // the current hold, for Term
	leaderReads atomic.Uint64
	watchWake   chan struct{}

	// Loop only.
	held      *hold
	waiting   map[string]chan struct{} // hold key -> its waiter's wake
	ended     bool
	closing   bool
	leader    election.Leadership
	leaderSeq uint64
}

// kind is what a service is: it decides the scripts, the token rule and
// the errors.
type kind int

const (
	kindLock     kind = iota // token: a new increment at grant
	kindElection             // token: the hold's Created
	kindRWLock               // token: a new increment (writer) or the read epoch's (reader)
)

// hold is one grant (or a waiting acquisition) in Redis.
type hold struct {
	key       string
	mode      byte // 'w', or 'r' for an rwlock's read hold
	created   int64
	token     int64
	value     string
	releasing bool
	suspended bool
}

func newService(cli *redis.Client, what, name string, k kind, opts []Option) (*service, error) {
	if cli == nil {
		return nil, fmt.Errorf("redisio: %s: nil client: %w", what, primitives.ErrInvalidArgument)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	s, own := o.session, false
	if s == nil {
		if s, err = newSession(cli, o); err != nil {
			return nil, err
		}
		own = true
	} else if s.cli != cli {
		return nil, fmt.Errorf("redisio: %s %q: the session runs on another client: %w", what, name, primitives.ErrInvalidArgument)
	}
	v := &service{
		s: s, own: own, kind: k, what: what, name: name, cancel: o.cancel, maxValue: o.maxValue,
		seq: name + "/seq", queue: name + "/queue", granted: name + "/held", rtok: name + "/rtok", wake: name + "/wake",
		fan: actor.NewFanout(primitives.Coalescable), sem: make(chan struct{}, 1), done: make(chan struct{}),
		watchWake: make(chan struct{}, 1), waiting: map[string]chan struct{}{},
	}
	switch k {
	case kindLock:
		v.notHeld, v.taken = lock.ErrNotHeld, lock.ErrLockTaken
	case kindRWLock:
		v.notHeld, v.taken = rwlock.ErrNotHeld, rwlock.ErrRWLockTaken
	case kindElection:
		v.notHeld, v.taken = election.ErrNotLeader, lock.ErrLockTaken
		v.obs = actor.NewFanout(func(election.Leadership) bool { return true })
	}
	if err := s.subscribe(o.ctx, v.wake); err != nil {
		v.finish()
		return nil, err
	}
	if _, err := loopCall(s, o.ctx, func() (struct{}, error) {
		if s.ended {
			return struct{}{}, s.Err()
		}
		s.services[v] = struct{}{}
		if k == kindElection {
			s.helpers.Add(1)
			go v.watch()
		}
		return struct{}{}, nil
	}); err != nil {
		v.finish()
		return nil, err
	}
	return v, nil
}

// Err is nil while the service is usable.
func (v *service) Err() error {
	v.errMu.Lock()
	defer v.errMu.Unlock()
	return v.err
}

// CancelOnSuspend reports whether Do and Lead end fn's context at
// Suspended (WithCancelOnSuspend).
func (v *service) CancelOnSuspend() bool { return v.cancel }

// Done is closed when the service is lost or closed.
func (v *service) Done() <-chan struct{} { return v.done }

// Subscribe delivers this owner's events after it returns.
func (v *service) Subscribe(ctx context.Context) <-chan primitives.Event { return v.fan.Subscribe(ctx) }

// setErr ends the service's usable life with err (the first cause wins).
func (v *service) setErr(err error) {
	v.errOnce.Do(func() {
		v.errMu.Lock()
		v.err = err
		v.errMu.Unlock()
		close(v.done)
	})
}

func (v *service) errf(format string, args ...any) error {
	return fmt.Errorf("redisio: %s %q: "+format, append([]any{v.what, v.name}, args...)...)
}

func (v *service) ref(key string) holdRef {
	r := holdRef{queue: v.queue, granted: v.granted, key: key, wake: v.wake, seq: v.seq}
	switch v.kind {
	case kindLock:
		r.handoff = "lock"
	case kindElection:
		r.handoff = "election"
	}
	return r
}

// recheck is how often a waiter, and an election's watcher, look again
// when no wake message came: the bound on a missed message or on a dead
// holder whose key expired without anyone publishing.
func (v *service) recheck() time.Duration {
	return min(max(v.s.ttl/4, 50*time.Millisecond), time.Second)
}

// Close releases what the service holds or waits for in Redis, then ends
// it: Released for its hold, its subscriptions closed, ErrClosed after.
func (v *service) Close() error {
	refs, err := loopCall(v.s, context.Background(), func() ([]holdRef, error) {
		if v.ended || v.closing {
			return nil, v.Err()
		}
		v.closing = true
		v.setErr(v.errf("%w", primitives.ErrClosed))
		var refs []holdRef
		if v.held != nil {
			v.held.releasing = true
			refs = append(refs, v.ref(v.held.key))
		}
		for k := range v.waiting {
			refs = append(refs, v.ref(k))
		}
		return refs, nil
	})
	if err != nil {
		v.finish()
		if errors.Is(err, primitives.ErrClosed) {
			return err
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	for _, r := range refs {
		if _, err := v.s.release(ctx, r); err != nil {
			v.s.log.Debug("redisio: release at Close", zap.String("key", r.key), zap.Error(err))
		}
	}
	cancel()
	_, _ = loopCall(v.s, context.Background(), func() (struct{}, error) {
		v.endLoop(v.Err(), true)
		return struct{}{}, nil
	})
	v.finish()
	return nil
}

// finish drops the service's channel subscription and, if the session
// was its own, closes the session.
func (v *service) finish() {
	v.finishOnce.Do(func() {
		v.s.unsubscribe(v.wake)
		if v.own {
			v.s.Close()
		}
	})
}

// endLoop ends the service with err: Released (closing) or Lost for its
// hold, its subscriptions closed. It returns the keys to delete in Redis.
// Loop only.
func (v *service) endLoop(err error, closing bool) []holdRef {
	if v.ended {
		return nil
	}
	v.ended = true
	v.setErr(err)
	var refs []holdRef
	if h := v.held; h != nil {
		refs = append(refs, v.ref(h.key))
		if closing {
			v.endHold(primitives.Released{Key: h.key, Token: tokenOf(*h), Created: h.created})
		} else {
			v.endHold(primitives.Lost{Key: h.key, Token: tokenOf(*h), Created: h.created, Err: err})
		}
	}
	for k := range v.waiting {
		refs = append(refs, v.ref(k))
	}
	clear(v.waiting)
	v.fan.Close()
	if v.obs != nil {
		v.obs.Close()
	}
	delete(v.s.services, v)
	return refs
}
