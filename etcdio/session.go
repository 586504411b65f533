package etcdio

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/internal/testhook"
	"github.com/ahrtr/disco/primitives"
)

// Timeouts for the RPCs a session makes on its own behalf, outside any
// caller's context.
const (
	grantTimeout   = 10 * time.Second // NewSession's lease grant
	revokeTimeout  = 5 * time.Second  // Close's lease revoke
	cleanupTimeout = 5 * time.Second  // deleting a key a caller gave up on
)

// Session is one lease and the event loop that owns it. See the package doc
// for the loop's rules. A Session is safe for concurrent use.
type Session struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	ttl   time.Duration
	log   *zap.Logger

	mb     *actor.Mailbox[func()]
	done   chan struct{} // closed by the loop when the session ends
	errMu  sync.Mutex
	err    error
	ctx    context.Context // ends with the session; stops the helpers
	cancel context.CancelFunc
	wg     sync.WaitGroup                  // keepalive and watch goroutines
	probe  chan struct{}                   // asks the keepalive goroutine to renew now
	seq    atomic.Uint64                   // makes this session's key names unique
	frozen atomic.Pointer[<-chan struct{}] // set while paused by a fault test

	closeOnce sync.Once
	closeErr  error

	// Owned by the loop goroutine.
	deadline time.Time
	timer    *time.Timer
	mirrors  map[string]*mirror
	claims   map[string]claim // prefixes in use, by kind
	members  map[member]struct{}
}

// member is a primitive running on a session. The loop calls sessionEnded
// once, on the loop, when the session ends; the member must not block.
type member interface {
	sessionEnded(err error)
}

// NewSession grants a lease and starts the session's event loop and
// keepalive. It fails with an error wrapping ErrInvalidArgument on bad input,
// and with the etcd error if the lease cannot be granted within 10 seconds.
// WithSession is not accepted here.
func NewSession(cli *clientv3.Client, opts ...Option) (*Session, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fmt.Errorf("etcdio: NewSession: %w", err)
	}
	if o.session != nil {
		return nil, fmt.Errorf("etcdio: NewSession: WithSession: %w", ErrInvalidArgument)
	}
	return newSession(cli, o)
}

func checkClient(cli *clientv3.Client) error {
	if cli == nil {
		return fmt.Errorf("nil etcd client: %w", ErrInvalidArgument)
	}
	if cli.Ctx().Err() != nil {
		return fmt.Errorf("etcd client is closed: %w", ErrInvalidArgument)
	}
	return nil
}

func newSession(cli *clientv3.Client, o options) (*Session, error) {
	if err := checkClient(cli); err != nil {
		return nil, fmt.Errorf("etcdio: NewSession: %w", err)
	}
	ctx, cancel := context.WithTimeout(cli.Ctx(), grantTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := cli.Grant(ctx, int64(o.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("etcdio: NewSession: grant lease: %w", err)
	}
	s := &Session{
		cli:      cli,
		lease:    resp.ID,
		ttl:      time.Duration(resp.TTL) * time.Second,
		log:      o.log.With(zap.String("lease", strconv.FormatInt(int64(resp.ID), 16))),
		mb:       actor.NewMailbox[func()](),
		done:     make(chan struct{}),
		probe:    make(chan struct{}, 1),
		deadline: sent.Add(time.Duration(resp.TTL) * time.Second),
		mirrors:  make(map[string]*mirror),
		claims:   make(map[string]claim),
		members:  make(map[member]struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.timer = time.NewTimer(time.Until(s.deadline))
	s.wg.Add(1)
	go s.keepalive()
	go s.run()
	s.log.Debug("session started", zap.Duration("ttl", s.ttl))
	return s, nil
}

// LeaseID returns the session's lease.
func (s *Session) LeaseID() clientv3.LeaseID { return s.lease }

// TTL returns the lease's time to live as granted by etcd.
func (s *Session) TTL() time.Duration { return s.ttl }

// Client returns the etcd client the session uses.
func (s *Session) Client() *clientv3.Client { return s.cli }

// Done is closed when the session ends: its lease was lost or Close was
// called. Every primitive on the session is done then too.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives. Afterwards it wraps primitives.ErrLost
// (the lease expired, was revoked, or could not be kept alive in time) or
// primitives.ErrClosed.
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close ends the session and revokes its lease, so that everything held under
// it is released in etcd at once rather than after the TTL. It never closes
// the etcd client. A second Close returns an error wrapping ErrClosed.
func (s *Session) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.post(func() { s.end(fmt.Errorf("etcdio: session closed: %w", primitives.ErrClosed)) })
		<-s.done
		s.wg.Wait()
		// A closed client cannot revoke: give up at once rather than retry.
		ctx, cancel := context.WithTimeout(s.cli.Ctx(), revokeTimeout)
		defer cancel()
		if _, err := s.cli.Revoke(ctx, s.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.closeErr = fmt.Errorf("etcdio: close session: revoke lease %x: %w", int64(s.lease), err)
		}
		s.log.Debug("session closed", zap.Error(s.closeErr))
	})
	if !first {
		return fmt.Errorf("etcdio: session already closed: %w", primitives.ErrClosed)
	}
	return s.closeErr
}

// run is the event loop.
func (s *Session) run() {
	var batch []func()
	for {
		select {
		case <-s.mb.Ready():
			batch = s.mb.Drain(batch)
			for _, f := range batch {
				if time.Now().After(s.deadline) {
					// Messages may have waited (a pause, a slow machine);
					// none is acted on past the lease's end.
					s.end(s.expired())
					return
				}
				f()
				if s.ended() {
					return
				}
			}
		case <-s.timer.C:
			if d := time.Until(s.deadline); d > 0 {
				s.timer.Reset(d)
				continue
			}
			s.end(s.expired())
			return
		}
	}
}

func (s *Session) expired() error {
	return fmt.Errorf("etcdio: lease %x: no keepalive acknowledged within the TTL of %v: %w",
		int64(s.lease), s.ttl, primitives.ErrLost)
}

func init() {
	testhook.PauseSession = func(session any, resume <-chan struct{}) {
		s := session.(*Session)
		s.frozen.Store(&resume)
		s.post(func() {
			<-resume
			s.frozen.Store(nil)
		})
	}
}

// thaw blocks while the session is paused by a fault test.
func (s *Session) thaw() {
	if p := s.frozen.Load(); p != nil {
		select {
		case <-*p:
		case <-s.ctx.Done():
		}
	}
}

func (s *Session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// end ends the session: every member learns why, later posts fail, the
// helpers stop, and Done closes. Loop only.
func (s *Session) end(err error) {
	if s.ended() {
		return
	}
	s.errMu.Lock()
	s.err = err
	s.errMu.Unlock()
	if !errors.Is(err, primitives.ErrClosed) {
		s.log.Warn("session lost", zap.Error(err))
	}
	for m := range s.members {
		m.sessionEnded(err)
	}
	s.members = nil
	for _, m := range s.mirrors {
		m.cancel()
	}
	s.mirrors = nil
	s.mb.Close()
	s.timer.Stop()
	s.cancel()
	close(s.done)
}

// post runs f on the loop. It reports false once the session has ended.
func (s *Session) post(f func()) bool { return s.mb.Post(f) }

// call runs f on the loop and waits for the answer f gives through its Reply.
// If the session ends first, the error is the session's.
func call[T any](ctx context.Context, s *Session, f func(actor.Reply[T])) (T, error) {
	v, err := actor.Call(ctx, s.done, func(r actor.Reply[T]) bool {
		return s.post(func() { f(r) })
	})
	if errors.Is(err, actor.ErrStopped) {
		err = s.Err()
	}
	return v, err
}

// ownerID returns a number no other primitive on this session has. With the
// lease it names the primitive's keys: see base.key.
func (s *Session) ownerID() uint64 { return s.seq.Add(1) }

// ownPrefix is the prefix of this session's keys under prefix: no other
// session's key starts with it.
func (s *Session) ownPrefix(prefix string) string {
	return prefix + strconv.FormatInt(int64(s.lease), 16) + "-"
}

// deleteKey deletes key, which this session wrote, outside any caller's
// context. It is for keys whose owner gave up: a failed delete is logged and
// left to the lease. Once the session or the client is closed there is
// nothing to do: the lease is gone or going.
func (s *Session) deleteKey(key string) {
	ctx, cancel := context.WithTimeout(s.ctx, cleanupTimeout)
	defer cancel()
	defer context.AfterFunc(s.cli.Ctx(), cancel)()
	if _, err := s.cli.Delete(ctx, key); err != nil {
		s.log.Warn("could not delete abandoned key; the lease will", zap.String("key", key), zap.Error(err))
	}
}
