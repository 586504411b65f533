package zkio

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
)

// spec says what sets a lock, a read/write lock and an election apart.
type spec struct {
	markers  []string // the queue's znode markers in Curator's layout
	notHeld  error    // lock.ErrNotHeld, election.ErrNotLeader
	taken    error    // lock.ErrLockTaken
	election bool     // follows who leads (LeaderChanged, Observe)
	// token issues the fencing token of a hold on node, once it holds; nil:
	// the znode's czxid.
	token func(ctx context.Context, svc *service, node, marker string) (int64, error)
}

// held is one hold (a lock grant, a term), as the loop records it.
type held struct {
	node    string
	marker  string // the kind of its znode: a read/write lock's mode
	created int64  // the znode's czxid: Created
	token   int64  // the fencing token: created, unless the spec issues tokens
	value   string
	lease   int64 // the session id, the znode's ephemeralOwner
	timeout time.Duration

	releasing bool          // Loop only: a release is under way
	stop      chan struct{} // ends the helper watching the znode
}

// service is every primitive: one owner in one queue (a lock's waiters, an
// election's candidates) on one session.
type service struct {
	s               *Session
	own             bool // the service made its session and closes it
	path            string
	spec            *spec
	cancelOnSuspend bool

	slot   chan struct{} // taken from the start of an acquisition to the end of its hold
	events *actor.Fanout[primitives.Event]
	ended  chan struct{} // closed by the loop when the service ends
	done   chan struct{} // closed once the end is complete
	err    atomic.Pointer[error]
	term   atomic.Pointer[held] // the current hold, for Term

	closeStarted atomic.Bool

	acqMu   sync.Mutex
	acqN    int           // acquisitions under way
	acqStop bool          // Close began: no new acquisition
	acqIdle chan struct{} // closed when acqStop and acqN == 0

	// Loop only.
	grant     *held
	isEnded   bool
	closing   bool
	suspended bool
	leader    leaderState
}

func newService(servers []string, path string, sp *spec, opts []Option) (*service, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	p, err := cleanPath(path)
	if err != nil {
		return nil, err
	}
	svc := &service{
		path:            p,
		spec:            sp,
		cancelOnSuspend: o.cancelOnSuspend,
		slot:            make(chan struct{}, 1),
		events:          actor.NewFanout(primitives.Coalescable),
		ended:           make(chan struct{}),
		done:            make(chan struct{}),
		acqIdle:         make(chan struct{}),
	}
	if o.session != nil {
		if len(servers) > 0 {
			return nil, fmt.Errorf("servers and WithSession together: the session has its connection: %w", ErrInvalidArgument)
		}
		svc.s = o.session
	} else {
		s, err := newSession(servers, o)
		if err != nil {
			return nil, err
		}
		svc.s, svc.own = s, true
	}
	if sp.election {
		svc.leader.init()
	}
	ctx, cancel := context.WithTimeout(o.ctx, 10*time.Second)
	defer cancel()
	_, err = call(ctx, svc, func(r actor.Reply[struct{}]) {
		svc.s.services[svc] = struct{}{}
		if sp.election {
			svc.s.helper(svc.followLeader)
		}
		if !r.Answer(struct{}{}, nil) {
			delete(svc.s.services, svc)
		}
	})
	if err != nil {
		if svc.own {
			svc.s.Close()
		}
		return nil, fmt.Errorf("zkio: join session: %w", err)
	}
	return svc, nil
}

// call asks the loop to run f with a reply, and waits for the answer.
func call[T any](ctx context.Context, svc *service, f func(actor.Reply[T])) (T, error) {
	v, err := actor.Call(ctx, svc.s.stopped, func(r actor.Reply[T]) bool {
		return svc.s.post(func() { f(r) })
	})
	if errors.Is(err, actor.ErrStopped) {
		if e := svc.Err(); e != nil {
			return v, e
		}
		return v, svc.s.Err()
	}
	return v, err
}

// Err is nil while the service is usable; then it wraps primitives.ErrLost
// or primitives.ErrClosed.
func (svc *service) Err() error {
	if p := svc.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (svc *service) Done() <-chan struct{} { return svc.done }

func (svc *service) Subscribe(ctx context.Context) <-chan primitives.Event {
	return svc.events.Subscribe(ctx)
}

// CancelOnSuspend reports whether lock.Do and election.Lead end fn's
// context at Suspended.
func (svc *service) CancelOnSuspend() bool { return svc.cancelOnSuspend }

// acquire queues a new znode carrying marker, with value as its data, and
// returns the hold once it holds; with try, it fails at once with
// spec.taken if it would wait. A second acquisition of the service waits
// for the first hold to end. If ctx has ended (or its deadline passed) when
// it fails, its error is ctx.Err() or wraps it, whatever else it wraps.
func (svc *service) acquire(ctx context.Context, marker, value string, try bool) (*held, error) {
	h, err := svc.acquireOnce(ctx, marker, value, try)
	if err != nil {
		err = ctxFirst(ctx, err)
	}
	return h, err
}

// ctxFirst returns err, made to wrap ctx.Err() too if ctx has ended or its
// deadline has passed.
func ctxFirst(ctx context.Context, err error) error {
	cerr := ctxtime.Ended(ctx)
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w (%w)", cerr, err)
}

func (svc *service) acquireOnce(ctx context.Context, marker, value string, try bool) (*held, error) {
	if err := svc.s.checkValue("campaign", value); err != nil {
		return nil, err
	}
	if err := svc.live(ctx); err != nil {
		return nil, err
	}
	svc.acqMu.Lock()
	if svc.acqStop {
		svc.acqMu.Unlock()
		return nil, fmt.Errorf("zkio: %s: %w", svc.path, primitives.ErrClosed)
	}
	svc.acqN++
	svc.acqMu.Unlock()
	defer func() {
		svc.acqMu.Lock()
		svc.acqN--
		if svc.acqStop && svc.acqN == 0 {
			close(svc.acqIdle)
		}
		svc.acqMu.Unlock()
	}()
	if try {
		select {
		case svc.slot <- struct{}{}:
		default:
			return nil, svc.spec.taken
		}
	} else {
		select {
		case svc.slot <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-svc.ended:
			return nil, svc.Err()
		}
	}
	h, err := svc.acquireSlot(ctx, marker, value, try)
	if err != nil {
		<-svc.slot
		// A request cut short by the session's end says so.
		if e := svc.Err(); e != nil && !errors.Is(err, primitives.ErrLost) && !errors.Is(err, primitives.ErrClosed) {
			err = fmt.Errorf("%w (%w)", e, err)
		}
	}
	return h, err
}

func (svc *service) acquireSlot(ctx context.Context, marker, value string, try bool) (*held, error) {
	node, err := svc.create(ctx, marker, []byte(value))
	if err != nil {
		return nil, err
	}
	o := &own{node: node, early: svc.stat(node)}
	if err := svc.wait(ctx, o, try); err != nil {
		return nil, err
	}
	created, err := svc.created(ctx, o)
	if err != nil {
		return nil, err
	}
	token := created
	if svc.spec.token != nil {
		if token, err = svc.spec.token(ctx, svc, node, marker); err != nil {
			svc.withdraw(node)
			return nil, err
		}
	}
	h := &held{node: node, marker: marker, created: created, token: token, value: value,
		lease: svc.s.SessionID(), timeout: svc.s.Timeout()}
	got, err := call(ctx, svc, func(r actor.Reply[*held]) { svc.granted(r, h) })
	if err != nil {
		if got == nil {
			svc.withdraw(node)
		}
		return nil, err
	}
	return got, nil
}

// granted makes h the service's hold: the answer, then Acquired. If the
// caller gave up meanwhile, h never becomes the hold: the caller, whose
// call failed, withdraws its znode and frees the slot (freeing it here too
// would free it twice). Loop only.
func (svc *service) granted(r actor.Reply[*held], h *held) {
	if svc.isEnded || svc.closing {
		r.Answer(nil, svc.endedErr())
		return
	}
	h.stop = make(chan struct{})
	svc.grant = h
	svc.term.Store(h)
	if !r.Answer(h, nil) {
		svc.grant = nil
		svc.term.Store(nil)
		return
	}
	svc.events.Publish(primitives.Acquired{Key: h.node, Token: fencing.Token(h.token), Created: h.created})
	if svc.suspended {
		svc.events.Publish(primitives.Suspended{Key: h.node, Token: fencing.Token(h.token), Created: h.created,
			Deadline: svc.s.wire.lastHeard().Add(svc.s.Timeout())})
	}
	svc.s.helper(func() { svc.watchHeld(h) })
}

// endedErr is the error of a call to a service that ended or is closing.
// Loop only.
func (svc *service) endedErr() error {
	if e := svc.Err(); e != nil {
		return e
	}
	return fmt.Errorf("zkio: %s: %w", svc.path, primitives.ErrClosed)
}

// watchHeld watches the hold's znode and tells the loop if it disappears
// while the session lives. Helper.
func (svc *service) watchHeld(h *held) {
	for {
		exists, _, ch, err := svc.s.conn.ExistsW(h.node)
		switch {
		case err == nil && !exists:
			svc.s.post(func() { svc.vanished(h) })
			return
		case err != nil:
			if !retryable(err) || !svc.s.sleep(retryPause) {
				return
			}
			continue
		}
		select {
		case ev := <-ch:
			if ev.Type == zk.EventNodeDeleted {
				svc.s.post(func() { svc.vanished(h) })
				return
			}
		case <-h.stop:
			return
		case <-svc.s.quit:
			return
		}
	}
}

// vanished ends h with Lost: its znode was deleted behind its back. The
// service stays usable. Loop only.
func (svc *service) vanished(h *held) {
	if svc.grant != h || h.releasing || svc.closing {
		return
	}
	svc.endHold(primitives.Lost{Key: h.node, Token: fencing.Token(h.token), Created: h.created,
		Err: fmt.Errorf("zkio: %s deleted by someone else: %w", h.node, primitives.ErrLost)})
}

// endHold publishes how the hold ended and frees the service for the next
// acquisition. Loop only.
func (svc *service) endHold(e primitives.Event) {
	h := svc.grant
	svc.grant = nil
	svc.term.Store(nil)
	close(h.stop)
	svc.events.Publish(e)
	select {
	case <-svc.slot:
	default:
	}
}

// release ends the hold named by created (a zero created names none, since
// every znode's czxid is positive), or with current the current hold if it
// carries marker ("": any): it deletes the znode, then the hold ends with
// Released. A release that fails keeps the hold and may be retried.
func (svc *service) release(ctx context.Context, created int64, current bool, marker string) error {
	h, err := call(ctx, svc, func(r actor.Reply[*held]) {
		switch {
		case svc.isEnded || svc.closing:
			r.Answer(nil, svc.endedErr())
		case svc.grant == nil || svc.grant.releasing || (!current && svc.grant.created != created) ||
			(current && marker != "" && svc.grant.marker != marker):
			r.Answer(nil, svc.spec.notHeld)
		default:
			h := svc.grant
			h.releasing = true
			if !r.Answer(h, nil) {
				h.releasing = false
			}
		}
	})
	if err != nil {
		return err
	}
	derr := svc.s.conn.Delete(h.node, -1)
	if errors.Is(derr, zk.ErrNoNode) {
		derr = nil
	}
	_, err = call(context.WithoutCancel(ctx), svc, func(r actor.Reply[struct{}]) {
		svc.released(h, derr)
		r.Answer(struct{}{}, nil)
	})
	if derr != nil {
		return fmt.Errorf("zkio: delete %s: %w", h.node, derr)
	}
	return err
}

// released ends h with Released if its znode was deleted (err == nil), or
// keeps it otherwise. Loop only.
func (svc *service) released(h *held, err error) {
	if svc.grant != h {
		return
	}
	if err != nil {
		h.releasing = false
		return
	}
	svc.endHold(primitives.Released{Key: h.node, Token: fencing.Token(h.token), Created: h.created})
}

// suspend tells the holder the session may end at deadline. Loop only.
func (svc *service) suspend(deadline time.Time) {
	svc.suspended = true
	if h := svc.grant; h != nil {
		svc.events.Publish(primitives.Suspended{Key: h.node, Token: fencing.Token(h.token), Created: h.created, Deadline: deadline})
	}
}

// resume tells the holder the session was confirmed again. Loop only.
func (svc *service) resume() {
	svc.suspended = false
	if h := svc.grant; h != nil {
		svc.events.Publish(primitives.Resumed{Key: h.node, Token: fencing.Token(h.token), Created: h.created})
	}
}

// end ends the service with err: Lost for its hold, then every channel
// closes. Loop only.
func (svc *service) end(err error) {
	if svc.isEnded {
		return
	}
	svc.isEnded = true
	if svc.Err() == nil {
		svc.err.Store(&err)
	}
	if h := svc.grant; h != nil {
		if errors.Is(err, primitives.ErrClosed) {
			svc.endHold(primitives.Released{Key: h.node, Token: fencing.Token(h.token), Created: h.created})
		} else {
			svc.endHold(primitives.Lost{Key: h.node, Token: fencing.Token(h.token), Created: h.created, Err: err})
		}
	}
	select {
	case <-svc.ended:
	default:
		close(svc.ended)
	}
	svc.leader.end()
	svc.events.Close()
	close(svc.done)
}

// Close releases what the service holds and withdraws a waiting
// acquisition, in ZooKeeper too, before it returns; then the service is
// done with ErrClosed. On its own session it closes the session too.
func (svc *service) Close() error {
	if !svc.closeStarted.CompareAndSwap(false, true) {
		<-svc.done
		return fmt.Errorf("zkio: %s: already closed: %w", svc.path, errors.Join(primitives.ErrClosed, svc.Err()))
	}
	closedErr := fmt.Errorf("zkio: %s: %w", svc.path, primitives.ErrClosed)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc.acqMu.Lock()
	svc.acqStop = true
	if svc.acqN == 0 {
		close(svc.acqIdle)
	}
	svc.acqMu.Unlock()
	// The loop stops the service's acquisitions (they withdraw their
	// znodes) and hands over its hold, which Close deletes.
	h, err := call(ctx, svc, func(r actor.Reply[*held]) {
		if svc.isEnded {
			r.Answer(nil, svc.Err())
			return
		}
		svc.closing = true
		svc.err.Store(&closedErr)
		close(svc.ended)
		r.Answer(svc.grant, nil)
	})
	if err != nil {
		if svc.own {
			svc.s.Close()
		}
		<-svc.done
		return nil
	}
	var derr error
	if h != nil {
		if derr = svc.s.conn.Delete(h.node, -1); errors.Is(derr, zk.ErrNoNode) {
			derr = nil
		}
	}
	// Acquisitions under way saw the service end and withdraw their
	// znodes; wait for them, so that Close leaves nothing behind.
	select {
	case <-svc.acqIdle:
	case <-ctx.Done():
	}
	svc.s.post(func() {
		svc.end(closedErr)
		delete(svc.s.services, svc)
	})
	if svc.own {
		// Ending the session deletes whatever the service left.
		svc.s.Close()
	} else if derr != nil && h != nil {
		svc.s.forgetNode(h.node)
	}
	<-svc.done
	return nil
}
