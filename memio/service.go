package memio

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/quote"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// The kinds of primitive, the metrics' kind label.
const (
	kindLock      = "lock"
	kindRWLock    = "rwlock"
	kindElection  = "election"
	kindSemaphore = "semaphore"
)

// service is every primitive that holds: a lock, an rwlock, an election or
// a semaphore on one name, owned by one session. Its shell's loop-only
// methods run under the store's mutex.
type service struct {
	*driver.Shell
	st        *Store
	s         *Session
	own       bool // the session is this service's own: Close closes it
	kind      string
	name      string
	q         *queue
	maxValue  int
	observers *actor.Fanout[election.Leadership] // elections
}

// checkName accepts a name that is not empty, is valid UTF-8 and is at most
// 1 KiB.
func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name: %w", ErrInvalidArgument)
	case name == "/":
		return fmt.Errorf(`name "/": the root of every other name: %w`, ErrInvalidArgument)
	case len(name) > maxName:
		return fmt.Errorf("name of %d bytes, more than %d: %w", len(name), maxName, ErrInvalidArgument)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not UTF-8: %w", name, ErrInvalidArgument)
	}
	return nil
}

var specs = map[string]struct{ notHeld, taken error }{
	kindLock:      {lock.ErrNotHeld, lock.ErrLockTaken},
	kindRWLock:    {rwlock.ErrNotHeld, rwlock.ErrRWLockTaken},
	kindElection:  {election.ErrNotLeader, lock.ErrLockTaken},
	kindSemaphore: {semaphore.ErrNotHeld, semaphore.ErrNoPermit},
}

// newService validates the input and makes a service of kind on name, on
// its own session or the one WithSession gives.
func newService(st *Store, kind, name string, opts []Option) (*service, options, error) {
	fail := func(err error) error { return fmt.Errorf("memio: new %s %s: %w", kind, quote.Name(name), err) }
	o, err := buildOptions(opts)
	if err != nil {
		return nil, o, fail(err)
	}
	if st == nil {
		return nil, o, fail(fmt.Errorf("nil Store: %w", ErrInvalidArgument))
	}
	if err := checkName(name); err != nil {
		return nil, o, fail(err)
	}
	if err := checkLockValue(kind, o); err != nil {
		return nil, o, fail(err)
	}
	s, own := o.session, false
	if s == nil {
		s, own = newSession(st, o), true
	} else if s.st != st {
		return nil, o, fail(fmt.Errorf("WithSession: the session is of another Store: %w", ErrInvalidArgument))
	}
	m := o.Metrics
	if m == nil {
		m = s.metrics
	}
	sp := specs[kind]
	svc := &service{st: st, s: s, own: own, kind: kind, name: name, maxValue: o.maxValue,
		Shell: driver.NewShell(driver.Spec{Kind: kind, Name: "memio: " + kind + " " + quote.Name(name),
			NotHeld: sp.notHeld, Taken: sp.taken, CancelOnSuspend: o.CancelOnSuspend, Metrics: m})}
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.err != nil {
		return nil, o, fail(s.err)
	}
	svc.q = st.queueOf(kind, name)
	s.services[svc] = struct{}{}
	if s.clock.Suspended() {
		svc.Suspend(s.clock.Deadline())
	}
	if kind == kindElection {
		svc.observers = actor.NewFanout(func(election.Leadership) bool { return true })
		svc.q.followers[svc] = struct{}{}
	}
	return svc, o, nil
}

// acquire writes a key of mode (and value) and waits until it holds; with
// try it fails at once with the shell's Taken error if it would wait. If
// ctx ends first the key is deleted and the error is ctx's.
func (svc *service) acquire(ctx context.Context, mode rwlock.Mode, value string, try bool) (driver.Hold, error) {
	if err := svc.Enter(ctx, try); err != nil {
		return driver.Hold{}, err
	}
	h, err := svc.enqueue(ctx, mode, value, try)
	if err != nil {
		svc.Leave()
		return h, err
	}
	// A paused session's caller learns of its grant once the pause ends;
	// if ctx ends first, the grant is released (its end lets the next
	// acquisition in).
	if err := svc.s.gate(ctx); err != nil {
		_ = svc.releaseNow(driver.CreatedAt(h.Created), false)
		return driver.Hold{}, err
	}
	if cur, ok := svc.Current(); !ok || cur.Created != h.Created {
		// The grant ended before the caller could have it (most often: a
		// pause outlasted the TTL): the caller never holds it.
		if err := svc.Err(); err != nil {
			return driver.Hold{}, err
		}
		return driver.Hold{}, fmt.Errorf("%s: the grant ended before the call returned: %w", svc.Spec().Name, errLost)
	}
	return h, nil
}

func (svc *service) enqueue(ctx context.Context, mode rwlock.Mode, value string, try bool) (driver.Hold, error) {
	if err := svc.s.gate(ctx); err != nil {
		return driver.Hold{}, err
	}
	st := svc.st
	began := time.Now() // the wait's metric, on the wall clock as its end
	var k *key
	h, err := actor.Call(ctx, svc.Done(), func(r actor.Reply[driver.Hold]) bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		if err := svc.usable(); err != nil {
			r.Answer(driver.Hold{}, err)
			return true
		}
		k = st.add(svc, mode, value, r, began)
		st.settle(svc.q)
		switch {
		case k.held:
		case try:
			st.remove(k)
			r.Answer(driver.Hold{}, fmt.Errorf("%s: %w", svc.Spec().Name, svc.Spec().Taken))
		default:
			k.waited = true
		}
		return true
	})
	if err != nil {
		st.mu.Lock()
		if k != nil && !k.held {
			st.remove(k)
		}
		st.mu.Unlock()
		if e := ctxtime.Ended(ctx); e != nil {
			return driver.Hold{}, e
		}
		if errors.Is(err, actor.ErrStopped) {
			return driver.Hold{}, svc.Err()
		}
	}
	return h, err
}

// usable returns why a request cannot be made now, if it cannot: the
// service is done, or FailNext failed it. Locked.
func (svc *service) usable() error {
	if err := svc.Err(); err != nil {
		return err
	}
	return svc.s.failure()
}

// release deletes the key of the grant m accepts. Given a context that has
// ended it releases nothing and returns the context's error, as the real
// backends do (they send nothing).
func (svc *service) release(ctx context.Context, m driver.Match) error {
	if err := driver.ContextErr(ctx); err != nil {
		return err
	}
	if err := svc.s.gate(ctx); err != nil {
		return err
	}
	return svc.releaseNow(m, true)
}

// releaseNow is release once the session is not paused; a release the
// caller did not ask for (faults false) is spared FailNext.
func (svc *service) releaseNow(m driver.Match, faults bool) error {
	svc.st.mu.Lock()
	defer svc.st.mu.Unlock()
	if err := svc.Err(); err != nil {
		return err
	}
	if faults {
		if err := svc.s.failure(); err != nil {
			return err
		}
	}
	h, err := svc.BeginRelease(m)
	if err != nil {
		return err
	}
	k, ok := svc.st.keys[h.Key]
	if !ok || k.created != h.Created {
		return svc.SettleRelease(h, driver.Gone, nil)
	}
	err = svc.SettleRelease(h, driver.Deleted, nil)
	svc.st.remove(k)
	return err
}

// keyOf returns the service's current key, if it holds. Locked.
func (svc *service) heldKey() *key {
	if h := svc.Held(); h != nil {
		if k, ok := svc.st.keys[h.Key]; ok && k.created == h.Created {
			return k
		}
	}
	return nil
}

// end ends the service with its session. Locked.
func (svc *service) end(err error, cause string) {
	svc.EndFor(fmt.Errorf("%s: %w", svc.Spec().Name, err), cause)
	svc.finish(err)
}

// finish fails every waiting call, deletes the service's keys and marks it
// done. Locked.
func (svc *service) finish(err error) {
	for k := range svc.s.keys {
		if k.svc != svc {
			continue
		}
		if !k.held {
			k.reply.Answer(driver.Hold{}, err)
		}
		svc.st.remove(k)
	}
	delete(svc.s.services, svc)
	if svc.q != nil {
		delete(svc.q.followers, svc)
	}
	if svc.observers != nil {
		svc.observers.Close()
	}
	svc.Finish(err)
}

// Close ends the service: its grant is released and its waiting call fails
// with an error wrapping primitives.ErrClosed; with its own session, the
// session is closed too. A second Close returns an error wrapping
// primitives.ErrClosed.
func (svc *service) Close() error {
	return svc.CloseOnce(func() error {
		err := fmt.Errorf("%s: closed: %w", svc.Spec().Name, primitives.ErrClosed)
		svc.st.mu.Lock()
		if !svc.Ended() {
			svc.EndFor(err, "")
			svc.finish(err)
		}
		svc.st.mu.Unlock()
		if svc.own {
			if err := svc.s.Close(); err != nil && !errors.Is(err, primitives.ErrClosed) {
				return err
			}
		}
		return nil
	})
}

// leaderChanged tells an election's subscribers and observers who leads
// now. Locked.
func (svc *service) leaderChanged(now election.Leadership) {
	svc.Spec().Metrics.LeaderChanged()
	svc.Publish(primitives.LeaderChanged{Key: now.Key, Value: now.Value, Token: now.FencingToken})
	svc.observers.Publish(now)
}

// SessionOf returns the session a memio primitive (a lock, read/write
// lock, election, semaphore or double barrier party) runs on, for a test
// to hurt it; nil for anything else.
func SessionOf(primitive any) *Session {
	switch p := primitive.(type) {
	case lockService:
		return p.s
	case rwlockService:
		return p.s
	case electionService:
		return p.s
	case semService:
		return p.s
	case *doubleParty:
		return p.s
	}
	return nil
}
