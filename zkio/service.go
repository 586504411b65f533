package zkio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// spec says what sets a lock, a read/write lock and an election apart.
type spec struct {
	kind     string   // the metrics' kind: lock, rwlock, election
	markers  []string // the queue's znode markers in Curator's layout
	notHeld  error    // lock.ErrNotHeld, election.ErrNotLeader
	taken    error    // lock.ErrLockTaken
	election bool     // follows who leads (LeaderChanged, Observe)
	// token issues the fencing token of a hold on node, once it holds; nil:
	// the znode's czxid.
	token func(ctx context.Context, svc *service, node string, mode rwlock.Mode) (int64, error)
}

// marker is the znode marker of a member of mode: the one place a
// read/write lock's rwlock.Mode becomes Curator's marker. Kinds with one
// marker ignore mode.
func (sp *spec) marker(mode rwlock.Mode) string {
	switch {
	case len(sp.markers) == 1:
		return sp.markers[0]
	case mode == rwlock.Read:
		return readMarker
	}
	return writeMarker
}

// service is every primitive: one owner in one queue (a lock's waiters, an
// election's candidates) on one session. Its grant is its shell's
// driver.Hold: Key is the znode, Created its czxid, LeaseID the session.
type service struct {
	*driver.Shell
	s         *Session
	own       bool // the service made its session and closes it
	path      string
	spec      *spec
	value     string // a lock's znodes' data (WithValue)
	metrics   *metrics.Metrics
	closedErr error
	// stop is closed by the loop when Close begins or the service ends:
	// acquisitions under way withdraw their znodes.
	stop chan struct{}
	// requests counts the service's requests under way on session
	// helpers that wrote, or withdraw, what it must not leave behind,
	// and its acquisitions' stats of their own znodes (see
	// inflight.Counter): Close waits for them.
	requests inflight.Counter

	sem *semState // a semaphore's; nil for other kinds

	// Loop only.
	stopping bool // stop is closed
	leader   leaderState
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
	if err := checkLockValue(sp, o); err != nil {
		return nil, err
	}
	svc := &service{
		path:      p,
		spec:      sp,
		value:     o.value,
		closedErr: fmt.Errorf("zkio: %s: %w", p, primitives.ErrClosed),
		stop:      make(chan struct{}),
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
	svc.metrics = o.Metrics
	if svc.metrics == nil {
		svc.metrics = svc.s.metrics
	}
	if sp.election {
		svc.leader.init(svc)
	}
	svc.Shell = driver.NewShell(driver.Spec{Kind: sp.kind, Name: "zkio: " + sp.kind + " " + p,
		NotHeld: sp.notHeld, Taken: sp.taken, CancelOnSuspend: o.CancelOnSuspend,
		Listeners: svc.leader.listeners, Metrics: svc.metrics})
	ctx, cancel := context.WithTimeout(o.Context, 10*time.Second)
	defer cancel()
	_, err = call(ctx, svc, func(r actor.Reply[struct{}]) {
		svc.s.join(svc)
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

// call asks the loop to run f with a reply, and waits for the answer. A nil
// ctx is refused (driver.ContextErr).
func call[T any](ctx context.Context, svc *service, f func(actor.Reply[T])) (T, error) {
	if ctx == nil {
		var zero T
		return zero, driver.ContextErr(ctx)
	}
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

// stopped returns why the service takes no more requests: its Err once
// done, ErrClosed while Close is under way; nil while it takes them.
func (svc *service) stopped() error {
	// Err first: it is set before Done is closed, and the loop closes stop
	// only after that.
	if e := svc.Err(); e != nil {
		return e
	}
	select {
	case <-svc.stop:
		return svc.closedErr
	default:
		return nil
	}
}

// acquire queues a new znode of mode (a read/write lock's; other kinds
// have one), with value as its data, and returns the grant once it holds;
// with try, it fails at once with spec.taken if it would wait. A second
// acquisition of the service waits for the first grant to end. If ctx has
// ended (or its deadline passed) when it fails, its error is ctx.Err()
// itself where the context's end alone made it fail, as lock.Service
// promises (a request cut short by it says so only in the log); where the
// service was also closed or its session lost, the error wraps ctx.Err()
// and that too.
func (svc *service) acquire(ctx context.Context, mode rwlock.Mode, value string, try bool) (driver.Hold, error) {
	h, err := svc.acquireOnce(ctx, mode, value, try)
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, primitives.ErrClosed), errors.Is(err, primitives.ErrLost):
		return h, ctxFirst(ctx, err)
	}
	if cerr := ctxtime.EndedBy(ctx, err); cerr != nil {
		if err != cerr { //nolint:errorlint // is it ctx.Err() itself?
			svc.s.log.Debug("zkio: acquisition given up", zap.String("path", svc.path), zap.Error(err))
		}
		return h, cerr
	}
	return h, ctxFirst(ctx, err)
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

func (svc *service) acquireOnce(ctx context.Context, mode rwlock.Mode, value string, try bool) (driver.Hold, error) {
	began := time.Now()
	if err := svc.s.checkValue("campaign", value); err != nil {
		return driver.Hold{}, err
	}
	if err := svc.live(ctx); err != nil {
		return driver.Hold{}, err
	}
	if err := svc.Enter(ctx, try); err != nil {
		return driver.Hold{}, err
	}
	h, err := svc.acquireEntered(ctx, mode, value, try, began)
	if err != nil {
		svc.Leave()
		// A request cut short by the service's end says so.
		if e := svc.stopped(); e != nil && !errors.Is(err, primitives.ErrLost) && !errors.Is(err, primitives.ErrClosed) {
			err = fmt.Errorf("%w (%w)", e, err)
		}
	}
	return h, err
}

// acquireEntered is acquire once the caller entered the shell. Close, if it
// began meanwhile, waits for the caller to leave, so that nothing it wrote
// is left when Close returns.
func (svc *service) acquireEntered(ctx context.Context, mode rwlock.Mode, value string, try bool, began time.Time) (driver.Hold, error) {
	if err := svc.live(ctx); err != nil {
		return driver.Hold{}, err
	}
	var h driver.Hold
	var err error
	if svc.sem != nil {
		h, err = svc.sem.acquire(ctx, svc, try)
	} else {
		h, err = svc.queued(ctx, mode, value, try)
	}
	if err != nil {
		return driver.Hold{}, err
	}
	h.LeaseID = svc.s.SessionID()
	got, err := call(ctx, svc, func(r actor.Reply[driver.Hold]) { svc.granted(r, h, began) })
	if err != nil {
		svc.withdraw(h.Key)
		return driver.Hold{}, err
	}
	return got, nil
}

// queued is a lock's, read/write lock's or election's acquisition: a znode
// of mode in the queue at path, held once its turn comes (see wait).
func (svc *service) queued(ctx context.Context, mode rwlock.Mode, value string, try bool) (driver.Hold, error) {
	node, err := svc.create(ctx, svc.path, svc.spec.marker(mode), []byte(value))
	if err != nil {
		return driver.Hold{}, err
	}
	o := &own{node: node, early: svc.stat(node, false)}
	waited, err := svc.wait(ctx, o, try)
	if err != nil {
		return driver.Hold{}, err
	}
	created, err := svc.created(ctx, o)
	if err != nil {
		return driver.Hold{}, err
	}
	token := created
	if svc.spec.token != nil {
		if token, err = svc.spec.token(ctx, svc, node, mode); err != nil {
			svc.withdraw(node)
			return driver.Hold{}, err
		}
	}
	return driver.Hold{Key: node, Created: created, Token: fencing.Token(token), Mode: mode, Value: value,
		Waited: waited}, nil
}

// granted records h as the service's grant and answers the caller with it;
// if the caller gave up meanwhile, h never becomes the grant: the caller,
// whose call failed, withdraws its znode and leaves the shell. Loop only.
func (svc *service) granted(r actor.Reply[driver.Hold], h driver.Hold, began time.Time) {
	if err := svc.stopped(); err != nil {
		r.Answer(driver.Hold{}, err)
		return
	}
	if svc.Grant(h, began, func(h driver.Hold) bool { return r.Answer(h, nil) }) {
		// The grant's znode is watched once the hold is
		// driver.HoldWatchAfter old: a short hold costs no watch, and its
		// release sends its own session no event.
		svc.watchDue(h, min(driver.HoldWatchAfter, driver.WaitWatchAfter(svc.s.TTL())))
	}
}

// watchDue has a helper watch h's znode (watchHeld) after d, if h is still
// the grant then; while a release of it is under way, it looks again
// after driver.HoldWatchAfter: a release that fails leaves the grant
// standing, and watched.
func (svc *service) watchDue(h driver.Hold, d time.Duration) {
	time.AfterFunc(d, func() {
		svc.s.post(func() {
			switch cur := svc.Held(); {
			case cur == nil || cur.Created != h.Created:
			case cur.Releasing():
				svc.watchDue(h, driver.HoldWatchAfter)
			default:
				svc.s.helper(func() { svc.watchHeld(h) })
			}
		})
	})
}

// watchHeld watches the grant's znode and tells the loop if it disappears
// while the session lives. It ends once the znode is gone (a release
// deletes it) or the session ends. Helper.
func (svc *service) watchHeld(h driver.Hold) {
	for {
		// A read with a watch sets none on a znode already gone (see
		// waitTurn).
		_, _, ch, err := svc.s.conn.GetW(h.Key)
		switch {
		case errors.Is(err, zk.ErrNoNode):
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
			svc.metrics.Woken(svc.spec.kind, 1)
			if ev.Type == zk.EventNodeDeleted {
				svc.s.post(func() { svc.vanished(h) })
				return
			}
		case <-svc.s.quit:
			return
		}
	}
}

// vanished ends h with Lost if it is still the grant and no release of it
// is under way: its znode was deleted behind its back. The service stays
// usable. Loop only.
func (svc *service) vanished(h driver.Hold) {
	cur := svc.Held()
	if cur == nil || cur.Created != h.Created || cur.Releasing() || svc.stopping {
		return
	}
	svc.Lose(svc.KeyDeleted(h.Key), metrics.CauseKeyDeleted)
}

// release ends the grant m matches: it deletes the znode, then the grant
// ends with Released. A release that fails keeps the grant and may be
// retried; one that finds the znode gone ends it with Lost.
func (svc *service) release(ctx context.Context, m driver.Match) error {
	h, err := call(ctx, svc, func(r actor.Reply[driver.Hold]) {
		if err := svc.stopped(); err != nil {
			r.Answer(driver.Hold{}, err)
			return
		}
		if cur := svc.Held(); cur != nil && cur.Releasing() {
			r.Answer(driver.Hold{}, svc.spec.notHeld) // the other release settles it
			return
		}
		svc.BeginReleaseFor(m, r.Answer)
	})
	if err != nil {
		return err
	}
	// A delete the connection cut short is tried again until the service
	// ends (the session's end takes the znode; the caller learns the loss)
	// or ctx does. The client's requests take no context, so the delete
	// runs on a session helper, and the release returns when ctx ends
	// even while ZooKeeper does not answer: its outcome unknown, the
	// release failed, and the grant stands (a deletion seen later ends it
	// Released).
	gone, derr := svc.deleteHeld(ctx, h.Key)
	out := driver.Deleted
	switch {
	case gone:
		out = driver.Gone
	case derr != nil:
		out = driver.Failed
		if retryable(derr) {
			derr = errors.Join(derr, svc.cause(ctx)) // why it stopped trying
		}
	}
	settled, err := call(context.WithoutCancel(ctx), svc, func(r actor.Reply[error]) {
		r.Answer(svc.SettleRelease(h, out, derr), nil)
	})
	if err != nil {
		return err
	}
	return settled
}

// deleteHeld is deleteNode of a held grant's znode, again and again, on a
// session helper: it returns deleteNode's answer, or ctx's error once ctx
// ends first (the delete may still land).
func (svc *service) deleteHeld(ctx context.Context, node string) (gone bool, err error) {
	type result struct {
		gone bool
		err  error
	}
	done := make(chan result, 1)
	if !svc.s.helper(func() {
		gone, err := svc.s.deleteNode(ctx, svc.stop, node, true)
		done <- result{gone, err}
	}) {
		return svc.s.deleteNode(ctx, svc.stop, node, true) // the session is closing
	}
	select {
	case r := <-done:
		return r.gone, r.err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// end ends the service with err: Lost (cause) for its grant, or Released
// if err wraps ErrClosed; then every channel closes. Loop only.
func (svc *service) end(err error, cause string) {
	if svc.Ended() {
		return
	}
	svc.EndFor(err, cause)
	if !svc.stopping {
		svc.stopping = true
		close(svc.stop)
	}
	svc.Finish(err)
	if svc.leader.follow != nil {
		svc.s.unfollowLeader(svc)
	}
	svc.leader.end()
}

// leftNode is the error of a Close on a shared session that could not
// delete node: a session helper deletes it later.
func leftNode(name, node string, err error) error {
	return fmt.Errorf("zkio: close %s: delete %s: %w (deleted once the session reaches ZooKeeper again, or with the session)",
		name, node, err)
}

// closeTimeout bounds a Close's wait for what it withdraws and deletes.
const closeTimeout = 10 * time.Second

// unansweredAtClose is the error of a Close of name on a shared session
// whose wait for the requests its calls left under way (see
// inflight.Counter) ended at closeTimeout.
func unansweredAtClose(name string) error {
	return fmt.Errorf("zkio: close %s: requests under way unanswered within %v: %w (what they wrote is deleted once the session reaches ZooKeeper again, or with the session)",
		name, closeTimeout, context.DeadlineExceeded)
}

// Close releases what the service holds and withdraws a waiting
// acquisition, in ZooKeeper too, before it returns, and waits for what its
// acquisitions left under way (see inflight.Counter), within closeTimeout; then
// the service is done with ErrClosed. On its own session it closes the session too; its
// error is then that of a close no server answered (see Session.Close),
// on a shared session that of a delete that failed. A second Close
// returns an error wrapping primitives.ErrClosed once the first has
// returned.
func (svc *service) Close() error { return svc.CloseOnce(svc.close) }

// close is the first Close's work (see driver.Shell.CloseOnce).
func (svc *service) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	// The loop stops the service's acquisitions (they withdraw their
	// znodes and leave the shell) and hands over its grant, which Close
	// deletes.
	type grant struct {
		h  driver.Hold
		ok bool
	}
	g, err := call(ctx, svc, func(r actor.Reply[grant]) {
		if svc.Ended() {
			r.Answer(grant{}, svc.Err())
			return
		}
		svc.stopping = true
		close(svc.stop)
		h, ok := svc.Current()
		r.Answer(grant{h, ok}, nil)
	})
	if err != nil {
		if svc.own {
			svc.s.Close()
		}
		<-svc.Done()
		return nil
	}
	var derr error
	if g.ok {
		// The grant keeps the shell: no acquisition is under way. On its
		// own session one try will do: ending the session deletes it.
		_, derr = svc.s.deleteNode(ctx, nil, g.h.Key, !svc.own)
	} else {
		// Wait for an acquisition under way to withdraw its znode and
		// leave, so that Close leaves nothing behind.
		_ = svc.Enter(ctx, false)
	}
	// Then for the requests the service's acquisitions left under way,
	// and their withdrawals: a create answered after its caller left has
	// its znode deleted once it is answered, not after Close returned. On
	// its own session, ending the session does that (see Session.Close).
	var werr error
	if !svc.own && !svc.requests.Wait(ctx) {
		werr = unansweredAtClose(svc.path)
	}
	svc.s.post(func() {
		svc.end(svc.closedErr, "")
		delete(svc.s.services, svc)
	})
	if svc.own {
		// Ending the session deletes whatever the service left.
		err = svc.s.closeOwn()
	} else if derr != nil {
		// Close tried for its whole bound: the helper that goes on
		// is not waited for (nil counter).
		svc.s.forgetNode(nil, g.h.Key)
		err = leftNode(svc.path, g.h.Key, derr)
	}
	<-svc.Done()
	if werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}
