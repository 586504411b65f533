// Package conformance checks that a backend keeps every promise of
// primitives/lock, primitives/rwlock, primitives/election and primitives
// (events and their delivery rules), in the spirit of testing/fstest.TestFS.
//
// A backend's own tests describe how to make its services and how to hurt
// them (Backend), and call Run, or TestLock, TestRWLock and TestElection one
// by one:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Backend{Name: "etcd", TTL: 2 * time.Second, ...})
//	}
//
// The suite talks to services through their interfaces only, and states
// backend-free laws: there is no backend-specific branch beyond the hooks.
// Each law is a subtest named after it, run in parallel with the others;
// Backend.TTL bounds how long the laws that wait for an expiry take, so a
// short TTL (a few seconds) keeps a run quick.
//
// Waiting is on results, events and channels, or by polling with a
// deadline. A few laws give a call a short deadline on purpose, to end it
// while it waits; where the suite must know that a waiter has queued and the
// interfaces cannot say so, the law holds whether or not it had.
package conformance

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// Backend makes services of one backend for the suite. Every factory call is
// a NEW owner with its own session (and its own client connection where the
// backend needs one, so that killing or pausing one owner's session does not
// touch another's). The factory registers the service's Close (and its
// client's) with t.Cleanup. Names given to factories are unique per test (the
// suite derives them from t.Name()); the factory maps a name to the backend's
// path/prefix. Owners made with the same name contend for the same lock or
// election.
type Backend struct {
	Name string        // "etcd", "zookeeper", "redis": for messages only
	TTL  time.Duration // the session TTL/timeout the factories use

	NewLock     func(t *testing.T, name string) lock.Service   // nil for a backend that offers elections only (then call TestElection alone)
	NewRWLock   func(t *testing.T, name string) rwlock.Service // nil: backend offers no rwlock (then TestRWLock is not called)
	NewElection func(t *testing.T, name string) election.Service

	// Hooks. svc is a service returned by one of the factories above.

	// KillSession makes svc's session die now, as if it expired (etcd:
	// revoke the lease).
	KillSession func(t *testing.T, svc any)
	// Pause freezes svc's session (its loop and its keepalive) as a long
	// garbage collection pause would, until resume is called. The suite
	// calls resume exactly once.
	Pause func(t *testing.T, svc any) (resume func())
	// DeleteKey deletes a grant's key (Grant.Key, Leadership.Key) behind
	// its owner's back. It is also given each of LayoutKeys.
	DeleteKey func(t *testing.T, key string)

	// PauseRenewal stops svc's session's renewals (keepalives, refreshes,
	// pings) from reaching the store, as a partition between the owner and
	// the store would, while its event loop goes on: the session is
	// Suspended, then Lost at its deadline unless resume is called first.
	// The suite calls resume exactly once.
	PauseRenewal func(t *testing.T, svc any) (resume func())
	// NewLockSharing makes a new owner of the lock name on the session of
	// with, a lock the factory made.
	NewLockSharing func(t *testing.T, name string, with lock.Service) lock.Service
	// LayoutKeys lists every key (znode, Redis key) the backend keeps for
	// the lock name at the moment: the holder's key and whatever else its
	// layout has (queues, counters, records). The suite deletes each in
	// turn with DeleteKey behind a holder's back.
	LayoutKeys func(t *testing.T, name string) []string
	// DeleteWaiter waits until svc, which the suite has made wait (Lock,
	// an rwlock's Lock, Campaign), has queued, then deletes the key (znode, queue entry) by which it
	// waits, behind its back.
	DeleteWaiter func(t *testing.T, svc any)
	// Construct makes a service of kind ("lock", "rwlock", "election") on
	// exactly name, as a user would pass it to the backend's constructor
	// (no mapping), and returns the constructor's result. The suite gives
	// it bad names only.
	Construct func(t *testing.T, kind, name string) (io.Closer, error)
	// MaxValue is the largest election value (Campaign, Proclaim) the
	// factories' services accept; the suite checks that one byte more is
	// refused.
	MaxValue int
	// BadNames lists names this backend refuses beyond those every backend
	// refuses (the empty name): names it reserves for its own keys, names
	// its store cannot hold.
	BadNames []string
}

// Run runs every section the backend offers: TestLock, TestRWLock (when
// b.NewRWLock is set) and TestElection, in parallel with each other. As with
// any parallel subtest, they run once the calling test function has
// returned, and before its Cleanup functions.
func Run(t *testing.T, b Backend) {
	t.Helper()
	b.check(t)
	t.Run("Lock", func(t *testing.T) {
		t.Parallel()
		TestLock(t, b)
	})
	if b.NewRWLock != nil {
		t.Run("RWLock", func(t *testing.T) {
			t.Parallel()
			TestRWLock(t, b)
		})
	}
	t.Run("Election", func(t *testing.T) {
		t.Parallel()
		TestElection(t, b)
	})
}

// check fails t at once if b lacks what every section needs.
func (b Backend) check(t *testing.T) {
	t.Helper()
	b.checkFor(t, true)
}

// checkElection fails t at once if b lacks what TestElection needs: a
// backend that offers elections only need not make locks.
func (b Backend) checkElection(t *testing.T) {
	t.Helper()
	b.checkFor(t, false)
}

// checkFor fails t at once if b lacks what the sections need; locks says
// whether they include the lock laws' hooks.
func (b Backend) checkFor(t *testing.T, locks bool) {
	t.Helper()
	var missing []string
	if b.TTL <= 0 {
		missing = append(missing, "TTL")
	}
	if locks && b.NewLock == nil {
		missing = append(missing, "NewLock")
	}
	if b.NewElection == nil {
		missing = append(missing, "NewElection")
	}
	if b.KillSession == nil {
		missing = append(missing, "KillSession")
	}
	if b.Pause == nil {
		missing = append(missing, "Pause")
	}
	if b.DeleteKey == nil {
		missing = append(missing, "DeleteKey")
	}
	if b.PauseRenewal == nil {
		missing = append(missing, "PauseRenewal")
	}
	if locks && b.NewLockSharing == nil {
		missing = append(missing, "NewLockSharing")
	}
	if locks && b.LayoutKeys == nil {
		missing = append(missing, "LayoutKeys")
	}
	if b.DeleteWaiter == nil {
		missing = append(missing, "DeleteWaiter")
	}
	if b.Construct == nil {
		missing = append(missing, "Construct")
	}
	if b.MaxValue <= 0 {
		missing = append(missing, "MaxValue")
	}
	if len(missing) > 0 {
		t.Fatalf("conformance: backend %q lacks %v", b.Name, missing)
	}
}

// law runs f as a parallel subtest named after the law it checks.
func law(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		t.Parallel()
		f(t)
	})
}

// patience bounds every wait for something that should happen soon, with
// room for one expiry of a session.
func (b Backend) patience() time.Duration { return 10*time.Second + 2*b.TTL }

// prompt bounds the wait for something that must happen without waiting for
// a session to expire: half the TTL, as a session kept alive expires no
// sooner than that after its last keepalive.
func (b Backend) prompt() time.Duration { return b.TTL / 2 }

// brief is the deadline the suite gives a call it wants to end while the
// call waits: long enough for a backend to queue the caller.
const brief = 300 * time.Millisecond

// ctx returns a context that ends when t does, or after a generous bound.
func (b Backend) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*b.patience())
	t.Cleanup(cancel)
	return ctx
}

// name is the name of the lock or election a test contends for.
func name(t *testing.T) string { return t.Name() }

// outcome is the result of a call made in the background.
type outcome[T any] struct {
	v   T
	err error
}

// start runs f in the background; its result arrives on the channel. f must
// return once the test's services are closed, which the factories arrange.
func start[T any](f func() (T, error)) <-chan outcome[T] {
	ch := make(chan outcome[T], 1)
	go func() {
		v, err := f()
		ch <- outcome[T]{v, err}
	}()
	return ch
}

// startErr is start for a call that returns only an error.
func startErr(f func() error) <-chan outcome[struct{}] {
	return start(func() (struct{}, error) { return struct{}{}, f() })
}

// await waits for the background call's result.
func await[T any](t *testing.T, b Backend, ch <-chan outcome[T], what string) (T, error) {
	t.Helper()
	select {
	case o := <-ch:
		return o.v, o.err
	case <-time.After(b.patience()):
		t.Fatalf("%s: no result within %v", what, b.patience())
	}
	panic("unreachable")
}

// awaitOK waits for the background call and fails t if it failed.
func awaitOK[T any](t *testing.T, b Backend, ch <-chan outcome[T], what string) T {
	t.Helper()
	v, err := await(t, b, ch, what)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// recv receives from ch, failing t after the patience.
func recv[T any](t *testing.T, b Backend, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(b.patience()):
		t.Fatalf("%s: nothing within %v", what, b.patience())
	}
	panic("unreachable")
}

// notYet fails t if the background call has already returned.
func notYet[T any](t *testing.T, ch <-chan outcome[T], what string) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("%s returned too early: %+v, %v", what, o.v, o.err)
	default:
	}
}

// eventually polls cond until it holds, or fails t after the patience.
func eventually(t *testing.T, b Backend, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(b.patience())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", b.patience(), what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// closed waits for ch to be closed, failing t after the patience.
func closed(t *testing.T, b Backend, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(b.patience()):
		t.Fatalf("%s not closed within %v", what, b.patience())
	}
}

// isClosed reports whether ch is closed now.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// readUntil reads ch until match accepts a value, which it returns, or ch
// is closed (then closed is true); it fails t after the patience.
func readUntil[E any](t *testing.T, b Backend, ch <-chan E, what string, match func(E) bool) (e E, closed bool) {
	t.Helper()
	deadline := time.After(b.patience())
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return e, true
			}
			if match(e) {
				return e, false
			}
		case <-deadline:
			t.Fatalf("%s: not within %v", what, b.patience())
		}
	}
}

// drainedClosed waits for a channel to be closed, discarding what is still
// queued on it.
func drainedClosed[E any](t *testing.T, b Backend, ch <-chan E, what string) {
	t.Helper()
	readUntil(t, b, ch, what+" to close", func(E) bool { return false })
}

// nextHold returns the next Acquired, Released or Lost on ch, skipping the
// kinds a hold's life does not consist of (LeaderChanged, Suspended,
// Resumed, and kinds added later).
func nextHold(t *testing.T, b Backend, ch <-chan primitives.Event, what string) primitives.Event {
	t.Helper()
	e, closed := readUntil(t, b, ch, what, func(e primitives.Event) bool {
		switch e.(type) {
		case primitives.Acquired, primitives.Released, primitives.Lost:
			return true
		}
		return false
	})
	if closed {
		t.Fatalf("%s: event channel closed", what)
	}
	return e
}

// hold names one hold for the event checks.
type hold struct {
	Key     string
	Token   fencing.Token
	Created int64
}

func lockHold(g lock.Grant) hold      { return hold{g.Key, g.Token(), g.Created} }
func rwHold(g rwlock.Grant) hold      { return hold{g.Key, g.Token(), g.Created} }
func term(l election.Leadership) hold { return hold{l.Key, l.Token(), l.Created} }

// wantAcquired fails t unless the next hold event is Acquired for h.
func wantAcquired(t *testing.T, b Backend, ch <-chan primitives.Event, h hold) {
	t.Helper()
	want := primitives.Acquired{Key: h.Key, Token: h.Token, Created: h.Created}
	if e := nextHold(t, b, ch, "Acquired"); e != want {
		t.Fatalf("event %#v, want %#v", e, want)
	}
}

// wantReleased fails t unless the next hold event is Released for h.
func wantReleased(t *testing.T, b Backend, ch <-chan primitives.Event, h hold) {
	t.Helper()
	want := primitives.Released{Key: h.Key, Token: h.Token, Created: h.Created}
	if e := nextHold(t, b, ch, "Released"); e != want {
		t.Fatalf("event %#v, want %#v", e, want)
	}
}

// wantLost fails t unless the next hold event is Lost for h, wrapping
// primitives.ErrLost.
func wantLost(t *testing.T, b Backend, ch <-chan primitives.Event, h hold) {
	t.Helper()
	e := nextHold(t, b, ch, "Lost")
	lost, ok := e.(primitives.Lost)
	if !ok || (hold{lost.Key, lost.Token, lost.Created}) != h || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("event %#v, want Lost for %+v with an error wrapping ErrLost", e, h)
	}
}

// wantAcquiredLost fails t unless the next hold events are Acquired and
// then Lost for h.
func wantAcquiredLost(t *testing.T, b Backend, ch <-chan primitives.Event, h hold) {
	t.Helper()
	wantAcquired(t, b, ch, h)
	wantLost(t, b, ch, h)
}

// running is a lock.Do, rwlock.DoRead, rwlock.DoWrite or election.Lead
// under way in the background, its fn holding grant until its context ends;
// events is a subscription opened before it started, and gd a guard that
// has admitted the grant's token.
type running[G interface{ Token() fencing.Token }] struct {
	grant  G
	events <-chan primitives.Event
	gd     *guard.Guard
	causes chan error
	result <-chan outcome[struct{}]
}

// startHeld subscribes to s, starts do with an fn that waits for its
// context to end and returns errFn, and waits until fn runs.
func startHeld[G interface{ Token() fencing.Token }](t *testing.T, b Backend, s ender, do func(fn func(context.Context, G) error) error) running[G] {
	t.Helper()
	grants, causes := make(chan G, 1), make(chan error, 1)
	r := running[G]{events: s.Subscribe(b.ctx(t)), gd: guard.New(), causes: causes}
	r.result = startErr(func() error {
		return do(func(ctx context.Context, g G) error {
			grants <- g
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return errFn
		})
	})
	select {
	case r.grant = <-grants:
		ok(t, r.gd.Check(r.grant.Token()), "guard admits the holder")
		return r
	case o := <-r.result:
		t.Fatalf("fn was not run: %v", o.err)
	case <-time.After(b.patience()):
		t.Fatalf("fn not run within %v", b.patience())
	}
	panic("unreachable")
}

// wantLost fails t unless fn's context ended with a cause wrapping ErrLost
// and the call returned fn's error joined with one wrapping ErrLost.
func (r running[G]) wantLost(t *testing.T, b Backend) {
	t.Helper()
	errIs(t, recv(t, b, r.causes, "fn's context to end"), primitives.ErrLost, "cause of fn's context")
	_, err := await(t, b, r.result, "the call running fn")
	errIs(t, err, errFn, "the call running fn")
	errIs(t, err, primitives.ErrLost, "the call running fn")
}

// errIs fails t unless err wraps target.
func errIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: %v, want an error wrapping %v", what, err, target)
	}
}

// isCtxErr fails t unless err is target itself, ctx.Err() of a call whose
// context ended while it waited: the interfaces promise ctx.Err(), as
// golang.org/x/sync/semaphore does, so that err == ctx.Err() holds as well
// as errors.Is.
func isCtxErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if err != target { //nolint:errorlint // the promise is ctx.Err() itself
		t.Fatalf("%s: %v, want ctx.Err() itself (%v)", what, err, target)
	}
}

// ok fails t on err.
func ok(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// increasing fails t unless the tokens strictly increase.
func increasing(t *testing.T, what string, tokens ...fencing.Token) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("%s: token %d after %d, want strictly increasing (%v)", what, tokens[i], tokens[i-1], tokens)
		}
	}
}

// pause freezes svc's session and returns its resume, which may be called
// more than once and is called when t ends in any case.
func (b Backend) pause(t *testing.T, svc any) func() {
	t.Helper()
	var once sync.Once
	resume := b.Pause(t, svc)
	r := func() { once.Do(resume) }
	t.Cleanup(r)
	return r
}

// ended is the life-cycle an ended service must show: Done closed, Err
// wrapping want, and a Subscribe channel closed at once.
type ender interface {
	Subscribe(ctx context.Context) <-chan primitives.Event
	Done() <-chan struct{}
	Err() error
}

func wantEnded(t *testing.T, b Backend, s ender, want error) {
	t.Helper()
	closed(t, b, s.Done(), "Done")
	errIs(t, s.Err(), want, "Err")
	drainedClosed(t, b, s.Subscribe(b.ctx(t)), "Subscribe of an ended service")
}

// closeHolder closes holder, whose subscription events saw it acquire h,
// and waits for the successor that was waiting: it must get its turn within
// b.prompt() of Close returning, not after a TTL. The holder's subscribers
// see Released for h, then their channels close, and it is done with
// ErrClosed.
func closeHolder[T any](t *testing.T, b Backend, holder interface {
	ender
	Close() error
}, events <-chan primitives.Event, h hold, successor <-chan outcome[T]) T {
	t.Helper()
	ok(t, holder.Close(), "Close of the holder")
	closedAt := time.Now()
	v := awaitOK(t, b, successor, "successor after the holder's Close")
	if d := time.Since(closedAt); d > b.prompt() {
		t.Fatalf("successor's turn came %v after the holder's Close, want within %v (not after a TTL of %v)", d, b.prompt(), b.TTL)
	}
	wantAcquired(t, b, events, h)
	wantReleased(t, b, events, h)
	drainedClosed(t, b, events, "subscription of the closed Service")
	wantEnded(t, b, holder, primitives.ErrClosed)
	return v
}

// wantAlive fails t if s has ended.
func wantAlive(t *testing.T, s ender, why string) {
	t.Helper()
	if err := s.Err(); err != nil || isClosed(s.Done()) {
		t.Fatalf("service ended %s: Err = %v", why, err)
	}
}

// errFn is what the suite's fn returns from Do and Lead, to check it comes
// back.
var errFn = errors.New("conformance: fn's own error")
