package redisio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// service is every primitive: a lock or an election on one scope (a name),
// owned by one session. Its loop-only fields belong to the session's loop.
type service struct {
	s       *Session
	own     bool // the session was made for this service; Close closes it
	kind    kind
	what    string
	name    string
	seq     string
	queue   string
	rtok    string
	wake    string
	notHeld error
	taken   error
	cancel  bool // WithCancelOnSuspend

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
		s: s, own: own, kind: k, what: what, name: name, cancel: o.cancel,
		seq: name + "/seq", queue: name + "/queue", rtok: name + "/rtok", wake: name + "/wake",
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
	r := holdRef{queue: v.queue, key: key, wake: v.wake, seq: v.seq}
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

// acquire is Lock, TryLock and Campaign: one hold at a time per service.
func (v *service) acquire(ctx context.Context, try bool, value string, mode byte) (hold, error) {
	if err := v.Err(); err != nil {
		return hold{}, err
	}
	if err := ctx.Err(); err != nil {
		return hold{}, err
	}
	if try {
		select {
		case v.sem <- struct{}{}:
		default:
			return hold{}, v.errf("%w", v.taken)
		}
	} else {
		select {
		case v.sem <- struct{}{}:
		case <-ctx.Done():
			return hold{}, ctx.Err()
		case <-v.done:
			return hold{}, v.Err()
		}
	}
	h, err := v.enqueue(ctx, try, value, mode)
	if err != nil {
		<-v.sem
	}
	return h, err
}

// enqueue creates the hold in Redis and waits for its turn.
func (v *service) enqueue(ctx context.Context, try bool, value string, mode byte) (hold, error) {
	tryArg := "0"
	if try {
		tryArg = "1"
	}
	// The script's outcome must be known to withdraw, so it is not cut
	// short by ctx; an unknown outcome leaves at most a key that nobody
	// refreshes, which dies with the TTL.
	opCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	var res []int64
	var err error
	if v.kind == kindRWLock {
		res, err = rwEnqueueScript.Run(opCtx, v.s.cli, []string{v.seq, v.queue, v.s.key, v.rtok},
			v.name, tryArg, string(mode), v.s.ttl.Milliseconds(), v.wake, v.s.id).Int64Slice()
	} else {
		res, err = enqueueScript.Run(opCtx, v.s.cli, []string{v.seq, v.queue, v.s.key},
			v.name, tryArg, value, v.s.ttl.Milliseconds(), v.wake, v.s.id).Int64Slice()
	}
	cancel()
	if err != nil {
		return hold{}, v.errf("enqueue: %w", err)
	}
	switch res[0] {
	case -1:
		return hold{}, v.sessionGone()
	case -2:
		return hold{}, v.errf("%w", v.taken)
	}
	h := hold{key: v.name + "/" + strconv.FormatInt(res[0], 10), mode: mode, created: res[0], token: res[1], value: value}
	if h.token != 0 {
		return h, v.grant(h)
	}
	return v.wait(ctx, h)
}

// sessionGone tells the loop that Redis no longer has the session's key.
func (v *service) sessionGone() error {
	v.s.loseAsync(errors.New("session key gone"))
	return v.errf("session %d key gone: %w", v.s.id, primitives.ErrLost)
}

// grant records h as held, or releases it if the service ended meanwhile.
func (v *service) grant(h hold) error {
	_, err := loopCall(v.s, context.Background(), func() (struct{}, error) {
		if v.ended || v.closing {
			return struct{}{}, v.Err()
		}
		delete(v.waiting, h.key)
		hh := h
		v.held = &hh
		v.term.Store(&h)
		v.fan.Publish(primitives.Acquired{Key: h.key, Token: tokenOf(h), Created: h.created})
		return struct{}{}, nil
	})
	if err != nil {
		v.withdraw(h.key)
	}
	return err
}

// wait parks the caller until its hold heads the queue: woken by the
// session's pub/sub when it becomes the head, or by the recheck timer.
func (v *service) wait(ctx context.Context, h hold) (hold, error) {
	wake := make(chan struct{}, 1)
	if _, err := loopCall(v.s, context.Background(), func() (struct{}, error) {
		if v.ended || v.closing {
			return struct{}{}, v.Err()
		}
		v.waiting[h.key] = wake
		return struct{}{}, nil
	}); err != nil {
		v.withdraw(h.key)
		return hold{}, err
	}
	t := time.NewTimer(0) // look once at once: a wake may have come before the loop knew the key
	defer t.Stop()
	for {
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			v.withdraw(h.key)
			return hold{}, ctx.Err()
		case <-v.done:
			v.withdraw(h.key)
			return hold{}, v.Err()
		}
		t.Reset(v.recheck())
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		res, err := v.check(cctx, h.key)
		cancel()
		if err != nil {
			v.s.log.Debug("redisio: check", zap.String("key", h.key), zap.Error(err))
			continue
		}
		switch res[0] {
		case -1:
			v.withdraw(h.key)
			return hold{}, v.sessionGone()
		case -3:
			v.withdraw(h.key)
			if err := v.Err(); err != nil {
				return hold{}, err
			}
			return hold{}, v.errf("waiting key %s deleted: %w", h.key, primitives.ErrLost)
		case 1:
			h.token = res[1]
			return h, v.grant(h)
		}
	}
}

// check runs the script that grants a waiting hold at its turn.
func (v *service) check(ctx context.Context, key string) ([]int64, error) {
	switch v.kind {
	case kindRWLock:
		return rwCheckScript.Run(ctx, v.s.cli, []string{v.seq, v.queue, v.s.key, key, v.rtok}, v.wake).Int64Slice()
	case kindLock:
		return checkScript.Run(ctx, v.s.cli, []string{v.seq, v.queue, v.s.key, key}, "1", v.wake).Int64Slice()
	default:
		return checkScript.Run(ctx, v.s.cli, []string{v.seq, v.queue, v.s.key, key}, "0", v.wake).Int64Slice()
	}
}

// withdraw forgets a waiting key and deletes it in Redis.
func (v *service) withdraw(key string) {
	v.s.mb.Post(func() { delete(v.waiting, key) })
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := v.s.release(ctx, v.ref(key)); err != nil {
		v.s.log.Debug("redisio: withdraw", zap.String("key", key), zap.Error(err))
	}
}

// release ends the current hold (any, of mode if mode is not 0) or the one
// named by created.
func (v *service) release(ctx context.Context, created int64, any bool, mode byte) error {
	h, err := loopCall(v.s, ctx, func() (hold, error) {
		if v.ended || v.closing {
			return hold{}, v.Err()
		}
		if v.held == nil || v.held.releasing || (!any && (created == 0 || created != v.held.created)) ||
			(mode != 0 && v.held.mode != mode) {
			return hold{}, v.errf("%w", v.notHeld)
		}
		v.held.releasing = true
		return *v.held, nil
	})
	if err != nil {
		return err
	}
	n, err := v.s.release(ctx, v.ref(h.key))
	if err != nil {
		v.s.mb.Post(func() {
			if v.held != nil && v.held.created == h.created {
				v.held.releasing = false
			}
		})
		return v.errf("release: %w", err)
	}
	_, _ = loopCall(v.s, context.Background(), func() (struct{}, error) {
		if !v.ended && v.held != nil && v.held.created == h.created {
			if n == 1 {
				v.endHold(primitives.Released{Key: h.key, Token: tokenOf(h), Created: h.created})
			} else {
				v.endHold(primitives.Lost{Key: h.key, Token: tokenOf(h), Created: h.created,
					Err: v.errf("key %s deleted: %w", h.key, primitives.ErrLost)})
			}
		}
		return struct{}{}, nil
	})
	if n == 0 {
		return v.errf("%w", v.notHeld)
	}
	return nil
}

func tokenOf(h hold) fencing.Token { return fencing.Token(h.token) }

// endHold ends the current hold with ev. Loop only.
func (v *service) endHold(ev primitives.Event) {
	v.held = nil
	v.term.Store(nil)
	select {
	case <-v.sem:
	default:
	}
	v.fan.Publish(ev)
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

// checkHeldLoop ends the hold with Lost if the refresh found its key gone,
// and has a helper take it out of the queue so that the next one is woken.
// Loop only.
func (v *service) checkHeldLoop(gone map[string]bool) {
	h := v.held
	if h == nil || h.releasing || v.closing || !gone[h.key] {
		return
	}
	v.endHold(primitives.Lost{Key: h.key, Token: tokenOf(*h), Created: h.created,
		Err: v.errf("key %s deleted: %w", h.key, primitives.ErrLost)})
	s, ref := v.s, v.ref(h.key)
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, _ = s.release(ctx, ref)
	}()
}

// suspendLoop and resumeLoop report the session's suspension to the
// holder. Loop only.
func (v *service) suspendLoop(deadline time.Time) {
	if h := v.held; h != nil && !h.suspended {
		h.suspended = true
		v.fan.Publish(primitives.Suspended{Key: h.key, Token: tokenOf(*h), Created: h.created, Deadline: deadline})
	}
}

func (v *service) resumeLoop() {
	if h := v.held; h != nil && h.suspended {
		h.suspended = false
		v.fan.Publish(primitives.Resumed{Key: h.key, Token: tokenOf(*h), Created: h.created})
	}
}

// appendKeys adds the service's hold keys, held and waiting. Loop only.
func (v *service) appendKeys(keys []string) []string {
	if v.held != nil {
		keys = append(keys, v.held.key)
	}
	for k := range v.waiting {
		keys = append(keys, k)
	}
	return keys
}

// wokenLoop wakes the waiter whose key heads the queue now, and an
// election's watcher. Loop only.
func (v *service) wokenLoop(head string) {
	if w, ok := v.waiting[head]; ok {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	if v.kind == kindElection {
		select {
		case v.watchWake <- struct{}{}:
		default:
		}
	}
}
