package redisio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/internal/reach"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

const (
	sessionCounter = "disco/sessions"
	sessionPrefix  = sessionTree + "/"
	// opTimeout bounds the requests a session makes on its own behalf
	// (withdrawing, cleaning up: see ownCtx and ownClient, which bound
	// them by the TTL and a Close's deadline too) and those it makes when
	// its caller's context has already ended.
	opTimeout = 5 * time.Second
)

// Session is one client identity in Redis: a key disco/session/<id> whose
// PX expiry its event loop refreshes, one pub/sub connection, and the
// primitives that run on it. A Session is lost when its key is not
// confirmed within its TTL; everything it holds is then lost with it.
type Session struct {
	cli *redis.Client
	// asked is the client of the requests the session makes on a
	// caller's behalf (see request): cli if its read and write timeouts
	// are at most the TTL, else a clone of it bounded by the TTL, so that
	// such a request a caller left ends within the TTL.
	asked   *redis.Client
	id      int64
	key     string
	ttl     time.Duration
	log     *zap.Logger
	metrics *metrics.Metrics

	mb      *actor.Mailbox[func()]
	quit    chan struct{} // closed to stop the loop and the helpers
	stopped chan struct{} // closed when the loop has returned
	done    chan struct{} // closed when the session is lost or closed
	endOnce sync.Once
	errMu   sync.Mutex
	err     error
	helpers sync.WaitGroup
	// stopping is set, under stopMu, once shutdown waits for the
	// helpers: goTracked starts none after it.
	stopMu   sync.Mutex
	stopping bool
	closeMu  sync.Mutex
	quitOnce sync.Once
	// ownDeadline is the deadline of the first Close, in Unix nanoseconds
	// (0 before it): no request the session makes on its own behalf ends
	// after it (see ownClient).
	ownDeadline atomic.Int64

	enqueues atomic.Uint64 // the nonces of this session's enqueues
	// leaderReads numbers the reads of elections' leaders, so that a
	// service applies none older than one it applied.
	leaderReads atomic.Uint64

	ps    *redis.PubSub
	subMu sync.Mutex
	subs  map[string]int // wake channel -> services subscribed

	// Loop only.
	services map[*service]struct{}
	// leaderWatches: one per election name (keyed by its channel) with
	// services on the session that someone listens to.
	leaderWatches map[string]*leaderWatch
	clock         driver.Clock // the deadline, from the send times of acknowledged refreshes
	ended         bool
	// early holds the keys of the wake messages on the session's own
	// channel that found no waiter registered, the latest last (at most
	// earlyWakes): a release can grant a hold and wake it before its
	// enqueue's reply has reached its waiter, which takes its wake from
	// here when it registers.
	early []string
	// afterCleanup, if set (by a test), runs on the helper that takes a
	// hold whose key was deleted out of the queue, after its script.
	afterCleanup func()
	// beforeWait, if set (by a test, before the session's first
	// acquisition), runs on the caller's goroutine between an enqueue that
	// left its hold waiting and the waiter's registration on the loop.
	beforeWait func(key string)
}

// NewSession creates a session on cli: a new id and its key, with the TTL
// (WithTTL, default DefaultTTL), suspending its holders after
// WithSuspendAfter's part of it (default half) without an acknowledged
// refresh, reporting to WithMetrics. The caller owns cli; Close never
// closes it.
func NewSession(cli *redis.Client, opts ...Option) (*Session, error) {
	if cli == nil {
		return nil, fmt.Errorf("redisio: nil client: %w", primitives.ErrInvalidArgument)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if o.valueSet {
		return nil, fmt.Errorf("redisio: WithValue is for locks, not sessions: %w", primitives.ErrInvalidArgument)
	}
	ctx, cancel := o.construction()
	defer cancel()
	return newSession(ctx, cli, o)
}

// newSession creates the session; ctx bounds its creation.
func newSession(ctx context.Context, cli *redis.Client, o options) (*Session, error) {
	sent := time.Now()
	id, err := sessionScript.Run(ctx, cli, []string{sessionCounter}, sessionPrefix, o.TTL.Milliseconds()).Int64()
	if err != nil {
		return nil, fmt.Errorf("redisio: create session: %w", reach.Failed(ctx, "Redis", []string{cli.Options().Addr}, sent, "", err))
	}
	s := &Session{
		cli: cli, asked: withTimeoutAtMost(cli, o.TTL), id: id, key: sessionPrefix + strconv.FormatInt(id, 10), ttl: o.TTL, log: o.Logger, metrics: o.Metrics,
		mb: actor.NewMailbox[func()](), quit: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{}),
		subs: map[string]int{}, services: map[*service]struct{}{}, leaderWatches: map[string]*leaderWatch{},
		clock: driver.NewClock(sent, o.TTL, driver.SuspendPart(o.TTL, o.SuspendAfter)),
	}
	// The session's own channel, its key, on which its waiters are woken,
	// opens the pub/sub connection at once, so that names' channels
	// subscribed later share it. go-redis opens that connection again
	// when it breaks, holding the PubSub's lock through the handshake,
	// which PubSub.Close (in stop) and every (un)subscribe wait for: on a
	// clone of the client whose timeouts are at most pubSubTimeout, Close
	// waits that long for such an attempt (and its dial), not the
	// client's ReadTimeout. The wait for messages has no timeout.
	s.ps = withTimeoutAtMost(cli, pubSubTimeout(o.TTL)).Subscribe(ctx, s.key)
	if _, err := s.ps.Receive(ctx); err != nil {
		s.ps.Close()
		cctx, cancel := s.ownCtx(context.Background(), opTimeout)
		s.cleanup(cctx, nil, time.Time{})
		cancel()
		return nil, fmt.Errorf("redisio: subscribe: %w", reach.Failed(ctx, "Redis", []string{cli.Options().Addr}, sent, "", err))
	}
	msgs := s.ps.Channel()
	s.helpers.Add(3)
	go s.run()
	go s.refresher()
	go func() {
		defer s.helpers.Done()
		for m := range msgs {
			s.mb.Post(func() { s.woken(m.Channel, m.Payload) })
		}
	}()
	return s, nil
}

// pubSubTimeout bounds each read and write of the session's pub/sub
// connection but its wait for messages (see newSession): a quarter of the
// TTL, so that a Close that finds go-redis opening that connection again
// waits for its handshake a part of the TTL at most.
func pubSubTimeout(ttl time.Duration) time.Duration { return ttl / 4 }

// LeaseID is the session's id, the number in its key: every grant's
// LeaseID on this session.
func (s *Session) LeaseID() int64 { return s.id }

// Client is the client the session runs on (the caller's; Close never
// closes it).
func (s *Session) Client() *redis.Client { return s.cli }

// Key is the session's liveness key, disco/session/<id>.
func (s *Session) Key() string { return s.key }

// TTL is the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session is lost or closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives; then it wraps primitives.ErrLost or
// primitives.ErrClosed.
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close ends every primitive on the session (they see Released for what
// they held), waits for their acquisitions under way to withdraw what
// their scripts wrote, as a primitive's Close does, deletes their keys
// and the session's key in Redis, and stops the loop and its helpers. It
// never closes the client.
//
// Close returns within the session's TTL (WithTTL, DefaultTTL by
// default), whatever the client's timeouts: one deadline, the TTL after
// the call, bounds all it waits for, each request it makes or waits for
// on the session's behalf included (a refresh, a release, a withdrawal,
// a leader watch's read), and no goroutine of the session is left once
// it returns. If Redis does not answer by then,
// Close gives up on what is not done (an acquisition's withdrawal, the
// deletes), stops the session all the same, and returns an error
// wrapping context.DeadlineExceeded that says what it gave up on; what it
// left in Redis expires with the TTL, as after a loss. Close of a session
// a Close ended returns an error wrapping primitives.ErrClosed; Close of
// a lost session returns nil.
func (s *Session) Close() error { return s.closeBy(time.Now().Add(s.ttl)) }

// closeBy is Close, everything in it bounded by deadline (a primitive's
// Close, closing its own session, passes its own).
func (s *Session) closeBy(deadline time.Time) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	s.limit(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	type ended struct {
		refs     []holdRef
		services []*service
	}
	// The loop never waits on Redis: it answers at once.
	e, err := loopCall(s, context.Background(), func() (ended, error) {
		if s.ended {
			return ended{}, s.Err()
		}
		err := fmt.Errorf("redisio: session %d: %w", s.id, primitives.ErrClosed)
		var e ended
		for v := range s.services {
			e.refs = append(e.refs, v.endLoop(err, "")...)
			e.services = append(e.services, v)
		}
		s.end(err)
		return e, nil
	})
	var undone []string
	if err == nil {
		n := 0
		for _, v := range e.services {
			if !v.awaitAcquisition(ctx) {
				n++
			}
		}
		switch {
		case n == 1:
			undone = append(undone, "an acquisition under way")
		case n > 1:
			undone = append(undone, fmt.Sprintf("%d acquisitions under way", n))
		}
		undone = append(undone, s.cleanup(ctx, e.refs, deadline)...)
	}
	s.shutdown()
	if errors.Is(err, primitives.ErrClosed) {
		return err
	}
	if len(undone) > 0 {
		return fmt.Errorf("redisio: session %d: close: %w", s.id, gaveUp(s.ttl, undone))
	}
	return nil
}

// gaveUp is the error of a Close that gave up at its deadline, the TTL
// after it began, on what undone names.
func gaveUp(ttl time.Duration, undone []string) error {
	return fmt.Errorf("gave up after the TTL %v, Redis not answering, on %s (left to expire with the TTL): %w",
		ttl, strings.Join(undone, ", "), context.DeadlineExceeded)
}

// limit records deadline as the latest end of any request the session
// makes on its own behalf from now on (see ownCtx and ownClient), unless
// an earlier one is recorded.
func (s *Session) limit(deadline time.Time) {
	d := deadline.UnixNano()
	for {
		old := s.ownDeadline.Load()
		if old != 0 && old <= d {
			return
		}
		if s.ownDeadline.CompareAndSwap(old, d) {
			return
		}
	}
}

// ownCtx returns the context of a request the session makes on its own
// behalf (withdrawing, cleaning up, reading a leader for a watch): it ends
// after d, and no later than a Close's deadline, so that no attempt
// begins after that. Each attempt runs on ownClient.
func (s *Session) ownCtx(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(d)
	if c := s.ownDeadline.Load(); c != 0 && c < deadline.UnixNano() {
		deadline = time.Unix(0, c)
	}
	return context.WithDeadline(parent, deadline)
}

// ownClient returns the client for one attempt of a request on the
// session's own behalf, which ends within the TTL, by a Close's deadline
// and by by (if not zero) even on a client whose context deadline
// go-redis does not heed (ContextTimeoutEnabled unset): the session's
// client if its timeouts end by then, else a clone of it (sharing its
// connections; go-redis runs no hook of the client on it) whose timeouts
// do, as for a refresh. So a request under way when Close begins ends
// within the TTL, and one begun later by Close's deadline. Past that
// deadline (or by) it returns errPastDeadline, which no attempt repeats
// (see retriable): the request ends there.
func (s *Session) ownClient(by time.Time) (*redis.Client, error) {
	limit := time.Now().Add(s.ttl)
	if c := s.ownDeadline.Load(); c != 0 && c < limit.UnixNano() {
		limit = time.Unix(0, c)
	}
	if !by.IsZero() && by.Before(limit) {
		limit = by
	}
	left := time.Until(limit)
	if left <= 0 {
		return nil, errPastDeadline
	}
	return withTimeoutAtMost(s.cli, left), nil
}

// errPastDeadline is the error of a request on a session's own behalf
// begun after a Close's deadline.
var errPastDeadline = fmt.Errorf("redisio: Close's deadline passed: %w", context.DeadlineExceeded)

// pastDeadline reports whether a request under Close's ctx failed with err
// because Close's deadline came: ctx ended, or ownClient found the
// deadline passed before ctx's timer fired.
func pastDeadline(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)
}

// goHelper runs f on a helper goroutine, which shutdown waits for. Loop
// only: a helper started on the loop is counted before shutdown waits.
func (s *Session) goHelper(f func()) {
	s.helpers.Add(1)
	go func() {
		defer s.helpers.Done()
		f()
	}()
}

// goTracked is goHelper from any goroutine: false, f not run, once
// shutdown has begun waiting for the helpers.
func (s *Session) goTracked(f func()) bool {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopping {
		return false
	}
	s.goHelper(f)
	return true
}

// shutdown stops the loop and every helper and waits for them.
func (s *Session) shutdown() {
	s.stop()
	s.stopMu.Lock()
	s.stopping = true
	s.stopMu.Unlock()
	s.helpers.Wait()
}

// stop tells the loop and the helpers to return; any goroutine.
func (s *Session) stop() {
	s.quitOnce.Do(func() {
		close(s.quit)
		s.ps.Close()
	})
}

// holdRef names a hold key in Redis for a release, with what its scope's
// release needs.
type holdRef struct {
	queue, granted, key, wake, seq, handoff string
	party                                   bool // a double barrier's party key: dbLeaveScript
}

// releaseOwn runs releaseScript for ref on behalf of the session s
// (dbLeaveScript, which may run twice, for a party's key), in attempts
// (see inAttempts) until ctx ends or stop is closed, each on
// ownClient(by), so that it ends within the TTL and by a Close's
// deadline. It returns 1 if the hold's key was the session's and is
// deleted now, 0 if it was gone. A repeat that finds the key gone after
// an attempt whose reply was lost counts it deleted: that attempt may
// have deleted it.
func (s *Session) releaseOwn(ctx context.Context, stop <-chan struct{}, ref holdRef, by time.Time) (int64, error) {
	cli := func() (*redis.Client, error) { return s.ownClient(by) }
	if ref.party {
		c, err := cli()
		if err != nil {
			return 0, err
		}
		return dbLeaveScript.Run(ctx, c, []string{ref.granted, ref.queue, ref.key}, "", ref.wake).Int64()
	}
	n, repeated, err := inAttempts(ctx, stop, func() (int64, error) {
		c, err := cli()
		if err != nil {
			return 0, err
		}
		return releaseScript.Run(ctx, onceScripter{c}, []string{ref.seq, ref.queue, ref.granted, s.key, ref.key},
			ref.wake, ref.handoff).Int64()
	})
	if err == nil && repeated && n == 0 {
		n = 1
	}
	return n, err
}

// releaseBounded is a caller's release (releaseOwn until ctx ends or
// the session does), ended early, its outcome unknown, when ctx ends or
// the session does: once the session is lost its keys expire with it,
// and the caller learns the loss now rather than when the client's own
// read timeout fires (go-redis heeds a context only between commands
// unless the client was made with ContextTimeoutEnabled). The script, if
// it runs on, runs on a goroutine of the session that Close waits for,
// and ends within the TTL and by Close's deadline (see ownClient).
func (s *Session) releaseBounded(ctx context.Context, ref holdRef) (int64, error) {
	type result struct {
		n   int64
		err error
	}
	ch := make(chan result, 1)
	if !s.goTracked(func() {
		n, err := s.releaseOwn(ctx, s.done, ref, time.Time{})
		ch <- result{n, err}
	}) {
		return 0, s.Err() // Close has ended the session
	}
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.done:
		return 0, s.Err()
	}
}

// closedErr is the session's error once Close has ended it.
func (s *Session) closedErr() error {
	if err := s.Err(); err != nil {
		return err
	}
	return fmt.Errorf("redisio: session %d: %w", s.id, primitives.ErrClosed)
}

// leaveGrace is how long a caller whose context ended waits for the
// answer to its request under way (see request) and for the withdrawal of
// what it wrote (see service.withdraw): with Redis answering, a caller
// that gives up returns once nothing it wrote is left.
const leaveGrace = 500 * time.Millisecond

// helpers runs the helpers of requests (see request): a Session, whose
// Close waits for them, or a barrier's looseHelpers.
type helpers interface {
	// goTracked runs f on a helper; false, f not run, if it runs no more.
	goTracked(f func()) bool
	// closedErr is the error of a request refused by goTracked.
	closedErr() error
}

// request makes req, a request to Redis on behalf of a caller whose
// context is ctx, and returns its answer. go-redis heeds a context only
// between commands (its deadline too, unless the client was made with
// ContextTimeoutEnabled), so that req would hold its caller until the
// client's ReadTimeout while Redis does not answer: req runs on a helper
// of the session instead, one per request under way (the waits between
// requests stay on the caller's goroutine), while its caller waits for
// the answer. Once ctx ends or stop closes, the caller waits up to
// leaveGrace more for it, then leaves: request returns left true, and
// req's answer goes to undo, on the helper, when it comes, to withdraw
// what req wrote. track counts req and its undo while they run, so that
// the Close of the caller's primitive waits for them; Close of the
// session waits for the helper too. req ends within the TTL (it runs on
// asked; a barrier's, which has no session, within opTimeout). A ctx
// already ended runs nothing and returns ctx's error; once Close has
// ended the session, request returns its error.
func request[R any](s helpers, track *inflight.Counter, ctx context.Context, stop <-chan struct{}, req func() (R, error), undo func(R, error)) (resp R, left bool, err error) {
	if err := ctx.Err(); err != nil {
		return resp, false, err
	}
	type answer struct {
		resp R
		err  error
	}
	ch := make(chan answer, 1)
	// taken is set by whichever comes first, the answer handed to the
	// caller or the caller leaving: the other then knows.
	var taken atomic.Bool
	track.Add()
	if !s.goTracked(func() {
		defer track.Done()
		r, err := req()
		if taken.CompareAndSwap(false, true) {
			ch <- answer{r, err}
			return
		}
		undo(r, err)
	}) {
		track.Done()
		return resp, false, s.closedErr()
	}
	select {
	case a := <-ch:
		return a.resp, false, a.err
	case <-ctx.Done():
	case <-stop:
	}
	t := time.NewTimer(leaveGrace)
	defer t.Stop()
	select {
	case a := <-ch:
		return a.resp, false, a.err
	case <-t.C:
	}
	if taken.CompareAndSwap(false, true) {
		return resp, true, nil
	}
	a := <-ch // handed over as the grace ended
	return a.resp, false, a.err
}

// leaving is request for a caller whose context has ended already, its
// withdrawal's outcome deciding what it returns: req runs all the same,
// and the caller waits up to leaveGrace for the answer before it leaves
// it to undo.
func leaving[R any](s helpers, track *inflight.Counter, req func() (R, error), undo func(R, error)) (resp R, left bool, err error) {
	return request(s, track, context.Background(), ended, req, undo)
}

// ended is a closed channel: a stop that has come.
var ended = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// settle runs f, which withdraws what a caller wrote, on a helper of the
// session, and waits up to leaveGrace for it: with Redis answering, the
// caller returns once f is done; otherwise f goes on without it (track
// counts it while it runs, and Close of the session waits for it). f's
// own bound is its caller's to set.
func (s *Session) settle(track *inflight.Counter, f func()) {
	done := s.goUndo(track, f)
	t := time.NewTimer(leaveGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// goUndo runs f, which withdraws what a caller wrote, on a helper of the
// session, and returns a channel closed once f is done; track counts f
// while it runs. Once Close has ended the session, it runs nothing (the
// session's keys go with it), and the channel is closed.
func (s *Session) goUndo(track *inflight.Counter, f func()) <-chan struct{} {
	done := make(chan struct{})
	track.Add()
	if !s.goTracked(func() {
		defer track.Done()
		defer close(done)
		f()
	}) {
		track.Done()
		close(done)
	}
	return done
}

// cleanup releases keys and deletes the session's key, in attempts
// until ctx ends (ctx from ownCtx, or Close's), each on ownClient(by);
// errors only log (the keys expire with the TTL anyway). It returns what
// it left because ctx ended first.
func (s *Session) cleanup(ctx context.Context, keys []holdRef, by time.Time) (undone []string) {
	for _, k := range keys {
		if ctx.Err() != nil {
			undone = append(undone, "the release of "+k.key)
			continue
		}
		if _, err := s.releaseOwn(ctx, nil, k, by); err != nil {
			s.log.Debug("redisio: release at session end", zap.String("key", k.key), zap.Error(err))
			if pastDeadline(ctx, err) {
				undone = append(undone, "the release of "+k.key)
			}
		}
	}
	if ctx.Err() != nil {
		return append(undone, "the delete of "+s.key)
	}
	_, _, err := inAttempts(ctx, nil, func() (int64, error) {
		// Sent once per attempt: go-redis's own resends would outlast ctx.
		c, err := s.ownClient(by)
		if err != nil {
			return 0, err
		}
		del := redis.NewCmd(ctx, "del", s.key)
		_ = c.Process(ctx, onceCmd{del})
		return del.Int64()
	})
	if err != nil {
		s.log.Debug("redisio: delete session key", zap.String("key", s.key), zap.Error(err))
		if pastDeadline(ctx, err) {
			undone = append(undone, "the delete of "+s.key)
		}
	}
	return undone
}

// end records the session's end. Loop only.
func (s *Session) end(err error) {
	s.endOnce.Do(func() {
		s.errMu.Lock()
		s.err = err
		s.errMu.Unlock()
		s.ended = true
		close(s.done)
		s.mb.Close()
	})
}

// lose ends the session as lost: every primitive gets Lost for what it
// held (why is the metrics.Cause), its waiters fail, and a helper deletes
// what is left of its keys. Loop only.
func (s *Session) lose(cause error, why string) {
	if s.ended {
		return
	}
	err := fmt.Errorf("redisio: session %d: %v: %w", s.id, cause, primitives.ErrLost)
	s.log.Info("redisio: session lost", zap.Int64("session", s.id), zap.Error(cause))
	var refs []holdRef
	for v := range s.services {
		refs = append(refs, v.endLoop(err, why)...)
	}
	s.end(err)
	s.goHelper(func() {
		ctx, cancel := s.ownCtx(context.Background(), opTimeout)
		defer cancel()
		s.cleanup(ctx, refs, time.Time{})
	})
}

// loseAsync asks the loop to end the session as lost; any goroutine.
func (s *Session) loseAsync(cause error, why string) { s.mb.Post(func() { s.lose(cause, why) }) }

// loopCall runs f on the loop and returns its result; if the loop has
// stopped, the session's error.
func loopCall[T any](s *Session, ctx context.Context, f func() (T, error)) (T, error) {
	return loopAsk(s, ctx, func(r actor.Reply[T]) { r.Answer(f()) })
}

// loopAsk runs f on the loop with the caller's reply, which f answers
// (and may learn that the caller gave up); if the loop has stopped, the
// session's error. A nil ctx is refused (driver.ContextErr).
func loopAsk[T any](s *Session, ctx context.Context, f func(actor.Reply[T])) (T, error) {
	if ctx == nil {
		var zero T
		return zero, driver.ContextErr(ctx)
	}
	v, err := actor.Call(ctx, s.stopped, func(r actor.Reply[T]) bool {
		return s.mb.Post(func() { f(r) })
	})
	if errors.Is(err, actor.ErrStopped) {
		if serr := s.Err(); serr != nil {
			return v, serr
		}
	}
	return v, err
}

// run is the session's event loop. Its entry points are the functions
// posted to its mailbox (each marked "Loop only") and its timer, set to
// the clock's next suspension point or deadline. Nothing here waits on
// Redis.
func (s *Session) run() {
	defer s.helpers.Done()
	defer close(s.stopped)
	defer s.stop()
	defer s.mb.Close()
	timer := time.NewTimer(s.untilNext())
	defer timer.Stop()
	var buf []func()
	for {
		select {
		case <-s.mb.Ready():
			testhook.Wait(s, s.quit)
			s.tick()
			buf = s.mb.Drain(buf)
			s.metrics.Drained(len(buf))
			for _, f := range buf {
				f()
			}
		case <-timer.C:
			testhook.Wait(s, s.quit)
			s.tick()
		case <-s.quit:
			return
		}
		if s.ended {
			// Answer whatever was posted before the mailbox closed.
			for _, f := range s.mb.Drain(buf) {
				f()
			}
			return
		}
		timer.Reset(s.untilNext())
	}
}

// ownScript runs script on the session's own behalf, on ownClient (or
// fails with its error).
func ownScript(ctx context.Context, s *Session, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	cli, err := s.ownClient(time.Time{})
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(err)
		return cmd
	}
	return script.Run(ctx, cli, keys, args...)
}
