package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
)

// Spec says what sets one primitive apart from the others.
type Spec struct {
	// Kind is the primitive's kind: "lock", "rwlock", "election", the
	// metrics' kind label.
	Kind string
	// Name begins every error the shell makes, e.g. "etcdio: lock /jobs".
	Name string
	// NotHeld is the primitive's sentinel for a request on a grant it does
	// not hold (lock.ErrNotHeld, rwlock.ErrNotHeld, election.ErrNotLeader).
	NotHeld error
	// Taken is the primitive's sentinel for a try that would wait
	// (lock.ErrLockTaken, rwlock.ErrRWLockTaken).
	Taken error
	// CancelOnSuspend is WithCancelOnSuspend's setting.
	CancelOnSuspend bool
	// Listeners, if set, counts the service's subscriptions (see
	// Listeners).
	Listeners *Listeners
	// Metrics receives the grants' measures; nil records nothing.
	Metrics *metrics.Metrics
}

// Shell is what every primitive's service is, whatever its store: it holds
// at most one grant at a time, delivers its events, and says when and why
// it is done. A driver's service embeds it (as a pointer, from NewShell)
// and so has its Subscribe, Done, Err and CancelOnSuspend. Embed it only in
// an unexported type: in an exported one, the loop-only methods would be
// part of the public API.
type Shell struct {
	spec   Spec
	events *actor.Fanout[primitives.Event]
	done   chan struct{}
	// sem is full while the service acquires or holds, like a sync.Mutex:
	// a caller enters before writing a key and leaves if it gets no grant;
	// once a grant is recorded only its end leaves.
	sem   chan struct{}
	errMu sync.Mutex
	err   error
	term  atomic.Pointer[Hold] // a copy of the loop's hold, for Current
	// closing is set by the service's first Close (CloseOnce), and
	// closed closed once that Close has returned.
	closing atomic.Bool
	closed  chan struct{}
	// until is the session's suspension while it lasts: written by the
	// loop alone (Suspend, Resume), read anywhere.
	until atomic.Pointer[suspension]

	// Loop only.
	hold  *Hold
	ended bool
}

// Face is the part of a Shell that a service shows its users: its events,
// its end, its grant and its session's suspension. A driver whose exported
// types embed an interface, not the shell, embeds this one, so that a
// method added to the shell's user side reaches them all.
type Face interface {
	Subscribe(ctx context.Context) <-chan primitives.Event
	// SubscribeHolds lets election.Lead follow its grants without making
	// an election follow who leads.
	SubscribeHolds(ctx context.Context) <-chan primitives.Event
	// CurrentGrant makes the service a primitives.GrantHolder.
	CurrentGrant() (primitives.Acquired, bool)
	// SuspendedUntil and SuspensionOver tell lock.Do and the supervisors
	// of a suspended session.
	SuspendedUntil() (time.Time, bool)
	SuspensionOver() <-chan struct{}
	Done() <-chan struct{}
	Err() error
	CancelOnSuspend() bool
}

var _ Face = (*Shell)(nil)

// NewShell returns the shell of a primitive as sp describes it.
func NewShell(sp Spec) *Shell {
	return &Shell{
		spec:   sp,
		events: actor.NewFanout(primitives.Coalescable),
		done:   make(chan struct{}),
		sem:    make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
}

// Spec returns what the shell was made with.
func (sh *Shell) Spec() Spec { return sh.spec }

// Subscribe delivers the service's events that happen after it returns; see
// package primitives for the rules. The channel is closed when ctx ends or,
// after the remaining events, when the service is done; for a nil ctx it is
// closed at once.
func (sh *Shell) Subscribe(ctx context.Context) <-chan primitives.Event {
	ch := sh.events.Subscribe(ctx)
	if ctx != nil && sh.spec.Listeners != nil {
		sh.spec.Listeners.Join(ctx)
	}
	return ch
}

// SubscribeHolds is Subscribe for a caller that needs only the events of
// the service's own grants (Acquired, Released, Lost, Suspended, Resumed),
// as lock.Do and election.Lead do: it does not join Spec.Listeners, so an
// election does not follow who leads for it. Other events (LeaderChanged)
// still reach it while someone else listens.
func (sh *Shell) SubscribeHolds(ctx context.Context) <-chan primitives.Event {
	return sh.events.Subscribe(ctx)
}

// Done is closed when the service is done: its session ended or it was
// closed.
func (sh *Shell) Done() <-chan struct{} { return sh.done }

// Err is nil while the service is usable; then it wraps primitives.ErrLost
// or primitives.ErrClosed.
func (sh *Shell) Err() error {
	sh.errMu.Lock()
	defer sh.errMu.Unlock()
	return sh.err
}

// CancelOnSuspend reports whether lock.Do, rwlock.DoRead, rwlock.DoWrite
// and election.Lead end fn's context at Suspended (WithCancelOnSuspend).
func (sh *Shell) CancelOnSuspend() bool { return sh.spec.CancelOnSuspend }

// ContextErr returns ctx.Err(), or, for a nil ctx, an error wrapping
// primitives.ErrInvalidArgument. Every call of a primitive that takes a
// context checks it so before it does anything: a nil context is bad input,
// refused with nothing written.
func ContextErr(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	return ctx.Err()
}

var errNilContext = fmt.Errorf("nil context: %w", primitives.ErrInvalidArgument)

// Closed returns a channel that is closed already: what a call that
// returns only a channel (Observe) gives when it has nothing to deliver,
// its context nil or ended, or its service done.
func Closed[T any]() <-chan T {
	ch := make(chan T)
	close(ch)
	return ch
}

// Usable returns why a new request cannot start, if it cannot: ctx is nil
// or ended, or the service is done.
func (sh *Shell) Usable(ctx context.Context) error {
	if err := ContextErr(ctx); err != nil {
		return err
	}
	return sh.Err()
}

// Enter lets one acquisition at a time through: at once or not at all if
// try (failing with an error wrapping Spec.Taken), else waiting until the
// service's grant ends, ctx ends or the service is done. Whoever entered
// leaves with Leave, unless the loop records its grant.
func (sh *Shell) Enter(ctx context.Context, try bool) error {
	if err := sh.Usable(ctx); err != nil {
		return err
	}
	if try {
		select {
		case sh.sem <- struct{}{}:
			return nil
		default:
			return fmt.Errorf("%s: held by this service: %w", sh.spec.Name, sh.spec.Taken)
		}
	}
	select {
	case sh.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-sh.done:
		return sh.Err()
	}
}

// Leave undoes an Enter whose acquisition got no grant.
func (sh *Shell) Leave() { <-sh.sem }

// Current returns a copy of the grant the service holds; ok is false if
// none. It reads no loop state and never blocks.
func (sh *Shell) Current() (h Hold, ok bool) {
	if p := sh.term.Load(); p != nil {
		return *p, true
	}
	return Hold{}, false
}

// CurrentGrant is Current as the grant's Acquired event, which makes every
// service a primitives.GrantHolder: the grant is there before the call that
// made it returns and gone before its end is told (End).
func (sh *Shell) CurrentGrant() (primitives.Acquired, bool) {
	h, ok := sh.Current()
	if !ok {
		return primitives.Acquired{}, false
	}
	return h.acquired(), true
}

// SuspendedUntil reports whether the session is suspended now, and the
// deadline at which it may end. It reads no loop state and never blocks:
// lock.Do reads it as a grant comes, before the grant's Suspended event
// reaches it.
func (sh *Shell) SuspendedUntil() (deadline time.Time, ok bool) {
	if p := sh.until.Load(); p != nil {
		return p.deadline, true
	}
	return time.Time{}, false
}

// SuspensionOver returns a channel that is closed once the session is not
// suspended: at once if it is not now, else when it resumes. A suspension
// that ends in the session's loss does not close it: Done does. It never
// blocks; the supervisors wait on it before they lock again after a hold
// that a suspension ended.
func (sh *Shell) SuspensionOver() <-chan struct{} {
	if p := sh.until.Load(); p != nil {
		return p.over
	}
	return notSuspended
}

// suspension is a suspension of the service's session: its deadline, and
// a channel closed when it ends with Resume.
type suspension struct {
	deadline time.Time
	over     chan struct{}
}

// notSuspended is the SuspensionOver of a session that is not suspended.
var notSuspended = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// CloseOnce is a service's Close: the first call runs release, the
// service's own closing, and returns its error; every later one waits until
// the first has returned, then returns an error wrapping
// primitives.ErrClosed. So whichever of several Closes returns, the service
// has let go of what it held, as far as release does. Any goroutine.
func (sh *Shell) CloseOnce(release func() error) error {
	if sh.closing.Swap(true) {
		<-sh.closed
		return fmt.Errorf("%s: already closed: %w", sh.spec.Name, primitives.ErrClosed)
	}
	defer close(sh.closed)
	return release()
}

// Held returns the grant the service holds, nil if none. Loop only.
func (sh *Shell) Held() *Hold { return sh.hold }

// Ended reports whether the service is done. Loop only.
func (sh *Shell) Ended() bool { return sh.ended }

func (sh *Shell) set(h *Hold) {
	sh.hold = h
	if h == nil {
		sh.term.Store(nil)
		return
	}
	c := *h
	sh.term.Store(&c)
}

// Grant records h as the service's grant and answers its caller with
// answer, which reports whether the caller took it; began is when the
// caller asked. The grant is recorded before the answer, so that Current
// sees it as soon as the caller returns; a refused answer (the caller gave
// up, deletes its key and leaves) undoes it and reports false.
// An accepted grant is announced with Acquired, followed by Suspended if
// the session is suspended. The caller must have entered. Loop only.
func (sh *Shell) Grant(h Hold, began time.Time, answer func(Hold) bool) bool {
	h.Since, h.releasing = time.Now(), 0
	sh.set(&h)
	if !answer(h) {
		sh.set(nil)
		return false
	}
	sh.spec.Metrics.Acquired(sh.spec.Kind, h.Since.Sub(began), h.Waited)
	sh.events.Publish(h.Acquired())
	if p := sh.until.Load(); p != nil {
		sh.events.Publish(h.Suspended(p.deadline))
	}
	return true
}

// Update applies f to the current grant, if any (a Proclaim's new value).
// Loop only.
func (sh *Shell) Update(f func(*Hold)) {
	if sh.hold != nil {
		f(sh.hold)
		sh.set(sh.hold)
	}
}

func (sh *Shell) leave() {
	select {
	case <-sh.sem:
	default:
	}
}

// End ends the current grant, if any, lets the next acquisition in, and
// publishes ev (nil: nothing); cause is a metrics.Cause constant for a
// loss, "" for a release. Loop only.
func (sh *Shell) End(ev primitives.Event, cause string) {
	if h := sh.hold; h != nil {
		sh.spec.Metrics.Ended(sh.spec.Kind, time.Since(h.Since), cause)
	}
	sh.set(nil)
	sh.leave()
	if ev != nil {
		sh.events.Publish(ev)
	}
}

// Release ends the current grant with Released. Loop only.
func (sh *Shell) Release() {
	if h := sh.hold; h != nil {
		sh.End(h.Released(), "")
	}
}

// Lose ends the current grant with Lost for err (which wraps
// primitives.ErrLost); cause is a metrics.Cause constant. A key deleted
// (metrics.CauseKeyDeleted) after a release of the grant failed ends it
// with Released instead: that release may have deleted it, its answer
// lost. Loop only.
func (sh *Shell) Lose(err error, cause string) {
	switch h := sh.hold; {
	case h == nil:
	case cause == metrics.CauseKeyDeleted && h.releaseFailed:
		sh.Release()
	default:
		sh.End(h.Lost(err), cause)
	}
}

// KeyDeleted is the loss of a grant whose key someone else deleted.
func (sh *Shell) KeyDeleted(key string) error {
	return fmt.Errorf("%s: key %s deleted by another client: %w", sh.spec.Name, key, primitives.ErrLost)
}

// EndFor ends the current grant, if any, because the session or the service
// ends with err: Released if err wraps primitives.ErrClosed, else Lost with
// cause. Err returns err from then on (before the event is told: whoever
// sees that Lost knows the service is over), and new requests fail with
// it; Finish follows. It returns the grant that ended, for the driver to
// delete its key. Loop only.
func (sh *Shell) EndFor(err error, cause string) (Hold, bool) {
	sh.errMu.Lock()
	if sh.err == nil {
		sh.err = err
	}
	sh.errMu.Unlock()
	h := sh.hold
	if h == nil {
		return Hold{}, false
	}
	g := *h
	if errors.Is(err, primitives.ErrClosed) {
		sh.End(g.Released(), "")
	} else {
		sh.End(g.Lost(err), cause)
	}
	return g, true
}

// Suspend tells the grant's owner, if any, that the session went
// unconfirmed and may end at deadline; a grant made before Resume hears it
// too. Loop only.
func (sh *Shell) Suspend(deadline time.Time) {
	p := sh.until.Load()
	was := p != nil
	over := make(chan struct{})
	if was {
		over = p.over // a new deadline for the same suspension
	}
	sh.until.Store(&suspension{deadline: deadline, over: over})
	if h := sh.hold; h != nil && !was {
		sh.events.Publish(h.Suspended(deadline))
	}
}

// Resume tells the grant's owner, if any, that the session was confirmed
// again. Loop only.
func (sh *Shell) Resume() {
	p := sh.until.Swap(nil)
	if p != nil {
		close(p.over)
	}
	if h := sh.hold; h != nil && p != nil {
		sh.events.Publish(h.Resumed())
	}
}

// Publish sends ev to the subscribers. Loop only.
func (sh *Shell) Publish(ev primitives.Event) { sh.events.Publish(ev) }

// On returns a copy of the current grant if m accepts it: else an error,
// the service's Err if it is done or one wrapping Spec.NotHeld. Loop only.
func (sh *Shell) On(m Match) (Hold, error) {
	switch h := sh.hold; {
	case sh.ended:
		return Hold{}, sh.Err()
	case h == nil || m != nil && !m(*h):
		return Hold{}, fmt.Errorf("%s: %w", sh.spec.Name, sh.spec.NotHeld)
	default:
		return *h, nil
	}
}

// BeginRelease marks a release of the current grant in flight, if m
// accepts the grant, and returns a copy of it: the driver then deletes its
// key, only if it is still that grant's (so a late retry never deletes a
// newer grant), and settles with SettleRelease. While one release is in
// flight a second finds nothing to release (an error wrapping
// Spec.NotHeld): the first's outcome decides, and a key the first deleted
// is never taken for a loss. Loop only.
func (sh *Shell) BeginRelease(m Match) (Hold, error) {
	h, err := sh.On(m)
	if err != nil {
		return h, err
	}
	if sh.hold.releasing > 0 {
		return Hold{}, fmt.Errorf("%s: a release is in flight: %w", sh.spec.Name, sh.spec.NotHeld)
	}
	sh.hold.releasing++
	return *sh.hold, nil
}

// BeginReleaseFor is BeginRelease for a caller that may have given up:
// answer delivers the result (an actor.Reply's Answer) and reports whether
// the caller took it; a release begun for a caller that had gone is undone
// at once (Unsent), so the grant stands and a retry can release it. Loop
// only.
func (sh *Shell) BeginReleaseFor(m Match, answer func(Hold, error) bool) {
	h, err := sh.BeginRelease(m)
	if !answer(h, err) && err == nil {
		_ = sh.SettleRelease(h, Unsent, nil)
	}
}

// Outcome is what a release's deletion found.
type Outcome int

const (
	// Deleted: the key was the grant's and is deleted.
	Deleted Outcome = iota
	// Gone: the key was already gone, deleted by someone else (or by an
	// earlier release of the grant that failed, see SettleRelease).
	Gone
	// Failed: the request failed; the grant stands and the release may be
	// retried.
	Failed
	// Unsent: the release's request was never sent (its caller gave up
	// before the loop began it): the grant stands as if no release had
	// begun, and a later deletion of its key is a loss.
	Unsent
)

// SettleRelease ends the release begun by BeginRelease of h: Deleted ends
// the grant with Released; Gone ends it with Lost and returns an error
// wrapping Spec.NotHeld, unless a release of the grant failed before (its
// deletion may have landed, its answer lost): then Gone ends it with
// Released too. Failed keeps the grant and returns err wrapped; Unsent
// keeps it and returns nil. Loop only.
func (sh *Shell) SettleRelease(h Hold, out Outcome, err error) error {
	cur := sh.hold
	if cur == nil || cur.Created != h.Created {
		// The grant ended meanwhile, which only the session's end does.
		if sh.ended {
			return sh.Err()
		}
		return fmt.Errorf("%s: %w", sh.spec.Name, sh.spec.NotHeld)
	}
	cur.releasing--
	switch out {
	case Deleted:
		sh.Release()
		return nil
	case Unsent:
		return nil
	case Gone:
		if cur.releaseFailed {
			sh.Release()
			return nil
		}
		sh.Lose(sh.KeyDeleted(cur.Key), metrics.CauseKeyDeleted)
		return fmt.Errorf("%s: key %s was already gone: %w", sh.spec.Name, h.Key, sh.spec.NotHeld)
	default:
		cur.releaseFailed = true
		return fmt.Errorf("%s: release %s: %w", sh.spec.Name, h.Key, err)
	}
}

// Finish marks the service done for err, which wraps primitives.ErrLost or
// primitives.ErrClosed: Done is closed and the subscriptions end after
// their remaining events; Err is err unless EndFor recorded an error
// first. Only the first call counts; it reports whether this was it. End
// the grant first (EndFor). Loop only.
func (sh *Shell) Finish(err error) bool {
	if sh.ended {
		return false
	}
	sh.ended = true
	sh.errMu.Lock()
	if sh.err == nil {
		sh.err = err
	}
	sh.errMu.Unlock()
	close(sh.done)
	sh.events.Close()
	return true
}
