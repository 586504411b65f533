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
	// (withdrawing, cleaning up) and those it makes when its caller's
	// context has already ended.
	opTimeout = 5 * time.Second
)

// Session is one client identity in Redis: a key disco/session/<id> whose
// PX expiry its event loop refreshes, one pub/sub connection, and the
// primitives that run on it. A Session is lost when its key is not
// confirmed within its TTL; everything it holds is then lost with it.
type Session struct {
	cli     *redis.Client
	id      int64
	key     string
	ttl     time.Duration
	log     *zap.Logger
	metrics *metrics.Metrics

	mb       *actor.Mailbox[func()]
	quit     chan struct{} // closed to stop the loop and the helpers
	stopped  chan struct{} // closed when the loop has returned
	done     chan struct{} // closed when the session is lost or closed
	endOnce  sync.Once
	errMu    sync.Mutex
	err      error
	helpers  sync.WaitGroup
	closeMu  sync.Mutex
	quitOnce sync.Once

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
		cli: cli, id: id, key: sessionPrefix + strconv.FormatInt(id, 10), ttl: o.TTL, log: o.Logger, metrics: o.Metrics,
		mb: actor.NewMailbox[func()](), quit: make(chan struct{}), stopped: make(chan struct{}), done: make(chan struct{}),
		subs: map[string]int{}, services: map[*service]struct{}{}, leaderWatches: map[string]*leaderWatch{},
		clock: driver.NewClock(sent, o.TTL, driver.SuspendPart(o.TTL, o.SuspendAfter)),
	}
	// The session's own channel, its key, on which its waiters are woken,
	// opens the pub/sub connection at once, so that names' channels
	// subscribed later share it.
	s.ps = cli.Subscribe(ctx, s.key)
	if _, err := s.ps.Receive(ctx); err != nil {
		s.ps.Close()
		s.cleanup(nil)
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
// they held), waits (within closeTimeout) for their acquisitions under way
// to withdraw what their scripts wrote, as a primitive's Close does,
// deletes their keys and the session's key in Redis, and stops the loop.
// It never closes the client.
func (s *Session) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	type ended struct {
		refs     []holdRef
		services []*service
	}
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
	if err == nil {
		wait, stop := context.WithTimeout(context.Background(), closeTimeout)
		for _, v := range e.services {
			v.awaitAcquisition(wait)
		}
		stop()
		s.cleanup(e.refs)
	}
	s.shutdown()
	if errors.Is(err, primitives.ErrClosed) {
		return err
	}
	return nil
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

// shutdown stops the loop and every helper and waits for them.
func (s *Session) shutdown() {
	s.stop()
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

// release runs releaseScript for ref on behalf of the session s
// (dbLeaveScript, which may run twice, for a party's key), in attempts
// (see inAttempts) until ctx ends or stop is closed. It returns 1 if the
// hold's key was the session's and is deleted now, 0 if it was gone. A
// repeat that finds the key gone after an attempt whose reply was lost
// counts it deleted: that attempt may have deleted it.
func (s *Session) release(ctx context.Context, stop <-chan struct{}, ref holdRef) (int64, error) {
	if ref.party {
		return dbLeaveScript.Run(ctx, s.cli, []string{ref.granted, ref.queue, ref.key}, "", ref.wake).Int64()
	}
	n, repeated, err := inAttempts(ctx, stop, func() (int64, error) {
		return releaseScript.Run(ctx, onceScripter{s.cli}, []string{ref.seq, ref.queue, ref.granted, s.key, ref.key},
			ref.wake, ref.handoff).Int64()
	})
	if err == nil && repeated && n == 0 {
		n = 1
	}
	return n, err
}

// releaseBounded is release, ended early, its outcome unknown, when ctx
// ends or the session does: once the session is lost its keys expire with
// it, and the caller learns the loss now rather than when the client's own
// read timeout fires (go-redis heeds a context only between commands
// unless the client was made with ContextTimeoutEnabled). The script, if
// it runs on, ends within the client's own timeouts.
func (s *Session) releaseBounded(ctx context.Context, ref holdRef) (int64, error) {
	type result struct {
		n   int64
		err error
	}
	ch := make(chan result, 1)
	go func() {
		n, err := s.release(ctx, s.done, ref)
		ch <- result{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.done:
		return 0, s.Err()
	}
}

// cleanup releases keys and deletes the session's key, bounded by
// opTimeout; errors only log (the keys expire with the TTL anyway).
func (s *Session) cleanup(keys []holdRef) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for _, k := range keys {
		if _, err := s.release(ctx, nil, k); err != nil {
			s.log.Debug("redisio: release at session end", zap.String("key", k.key), zap.Error(err))
		}
	}
	if err := s.cli.Del(ctx, s.key).Err(); err != nil {
		s.log.Debug("redisio: delete session key", zap.String("key", s.key), zap.Error(err))
	}
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
	s.goHelper(func() { s.cleanup(refs) })
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
// session's error.
func loopAsk[T any](s *Session, ctx context.Context, f func(actor.Reply[T])) (T, error) {
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
