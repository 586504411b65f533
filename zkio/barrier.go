package zkio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
)

// zkBarrier is barrier.Barrier in the layout of Curator's
// DistributedBarrier: the barrier is held while the persistent znode path
// exists. The znode outlives its holder, as the recipe's does.
type zkBarrier struct {
	path    string
	name    string
	s       *Session // WithSession's; nil: each call has a session of its own
	servers []string
	o       options // a call's own session's
	watches spares
}

// NewBarrier returns a barrier held while the persistent znode path exists,
// in the layout of Curator's DistributedBarrier: disco and Curator parties
// on one path hold, release and wait on one barrier. Hold creates the znode
// (and its missing parents), Release deletes it, Wait watches it.
//
// With WithSession (and nil servers) every call runs on that session, which
// the caller closes. Without it a barrier has nothing to close: each call
// connects a session of its own to servers for its duration (bounded by its
// ctx) and ends it before returning, so a barrier costs a session's
// connect and close per call, and holds no connection between calls. The
// options that configure a session (WithTTL, WithSessionTimeout,
// WithSuspendAfter, WithLogger, WithMetrics) configure each call's session;
// WithContext bounds nothing (each call's ctx does); WithCancelOnSuspend is
// refused, having no meaning for a barrier. Barriers carry no tokens.
func NewBarrier(servers []string, path string, opts ...Option) (barrier.Barrier, error) {
	p, o, err := barrierArgs(servers, path, opts)
	if err != nil {
		return nil, fmt.Errorf("zkio: new barrier: %w", err)
	}
	return &zkBarrier{path: p, name: "barrier " + p, s: o.session, servers: servers, o: o}, nil
}

// barrierArgs checks a barrier's or double barrier's arguments and returns
// its clean path and options.
func barrierArgs(servers []string, path string, opts []Option) (string, options, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return "", o, err
	}
	p, err := cleanPath(path)
	if err != nil {
		return "", o, err
	}
	if o.CancelOnSuspend {
		return "", o, fmt.Errorf("WithCancelOnSuspend configures locks and elections, not barriers: %w", ErrInvalidArgument)
	}
	if o.session != nil {
		if len(servers) > 0 {
			return "", o, fmt.Errorf("servers and WithSession together: the session has its connection: %w", ErrInvalidArgument)
		}
		return p, o, nil
	}
	return p, o, checkServers(servers)
}

// session returns the session a call runs on, and what ends it after the
// call: WithSession's, kept; or a new one, closed.
func (b *zkBarrier) session(ctx context.Context) (*Session, func(), error) {
	if b.s != nil {
		if err := b.s.Err(); err != nil {
			return nil, nil, err
		}
		return b.s, func() {}, nil
	}
	o := b.o
	o.Context = ctx
	s, err := newSession(b.servers, o)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}

// call runs f on a session for ctx, and says what failed. It starts
// nothing for a nil or ended ctx.
func (b *zkBarrier) call(ctx context.Context, what string, f func(s *Session) error) error {
	if err := driver.ContextErr(ctx); err != nil {
		return fmt.Errorf("zkio: %s: %s: %w", b.name, what, err)
	}
	s, end, err := b.session(ctx)
	if err != nil {
		return fmt.Errorf("zkio: %s: %s: %w", b.name, what, ctxFirst(ctx, err))
	}
	defer end()
	if err := f(s); err != nil {
		if errors.Is(err, barrier.ErrHeld) || errors.Is(err, barrier.ErrNotHeld) {
			return fmt.Errorf("zkio: %s: %w", b.name, err)
		}
		return fmt.Errorf("zkio: %s: %s: %w", b.name, what, ctxFirst(ctx, err))
	}
	return nil
}

// gaveUp returns why a call stopped retrying: ctx's end, else the
// session's.
func gaveUp(ctx context.Context, s *Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Err(); err != nil {
		return err
	}
	return errors.New("connection to ZooKeeper lost")
}

// Hold creates the barrier's znode, with a value of its own as data, so
// that a create retried after the connection broke under it knows its own
// znode from another holder's. ErrHeld if the znode exists. A Hold whose
// ctx ends while the connection is down may have raised the barrier: Hold
// then says ErrHeld, and Release lowers it.
func (b *zkBarrier) Hold(ctx context.Context) error {
	return b.call(ctx, "hold", func(s *Session) error {
		mark := []byte("disco-" + uuid.NewString())
		run := func(req func() error) error { return s.request(ctx, nil, nil, nil, req, nil) }
		create := func() error {
			return s.request(ctx, nil, nil, nil, func() error {
				_, err := s.conn.Create(b.path, mark, 0, zk.WorldACL(zk.PermAll))
				return err
			}, func(err error) {
				// Given up on while it ran: the barrier it may have
				// raised, known by its mark, is lowered.
				if err != nil && !retryable(err) {
					return
				}
				if data, st, gerr := s.conn.Get(b.path); gerr == nil && bytes.Equal(data, mark) {
					_ = s.conn.Delete(b.path, st.Version)
				}
			})
		}
		return retrying(ctx, s, func(retried bool) error {
			err := create()
			if parent := b.path[:strings.LastIndex(b.path, "/")]; errors.Is(err, zk.ErrNoNode) && parent != "" {
				if err := makePath(s.conn, parent, run, func() bool { return s.pause(ctx, nil) },
					func() error { return gaveUp(ctx, s) }); err != nil {
					return err
				}
				err = create()
			}
			if errors.Is(err, zk.ErrNodeExists) {
				if retried {
					if data, _, gerr := s.conn.Get(b.path); gerr == nil && bytes.Equal(data, mark) {
						return nil
					}
				}
				return barrier.ErrHeld
			}
			return err
		})
	})
}

// Release deletes the barrier's znode; ErrNotHeld if there is none. A
// delete retried after the connection broke under it that finds no znode
// returns nil: the barrier is down, perhaps by this very call.
//
// ZooKeeper deletes no znode that has children: if znodes are under the
// barrier's (another name's, such as a lock's on <path>/sub, or stray
// ones), the barrier stays held and Release fails with an error wrapping
// ErrInvalidArgument (the barrier's path is the parent of other names;
// see the package doc's Barriers) and zk.ErrNotEmpty.
func (b *zkBarrier) Release(ctx context.Context) error {
	return b.call(ctx, "release", func(s *Session) error {
		return retrying(ctx, s, func(retried bool) error {
			// A delete left running lowers the barrier, as asked.
			err := s.request(ctx, nil, nil, nil, func() error { return s.conn.Delete(b.path, -1) }, nil)
			switch {
			case errors.Is(err, zk.ErrNoNode):
				if retried {
					return nil
				}
				return barrier.ErrNotHeld
			case errors.Is(err, zk.ErrNotEmpty):
				return fmt.Errorf("%s has znodes under it, which ZooKeeper does not delete with it: the barrier stays held; "+
					"no other name may be below a barrier's path: %w (%w)", b.path, ErrInvalidArgument, err)
			}
			return err
		})
	})
}

// retrying runs try until it fails other than with the connection (or
// succeeds), pausing between tries; retried tells try that an earlier
// try's answer was lost with the connection.
func retrying(ctx context.Context, s *Session, try func(retried bool) error) error {
	for retried := false; ; retried = true {
		err := try(retried)
		if !retryable(err) {
			return err
		}
		if !s.pause(ctx, nil) {
			return gaveUp(ctx, s)
		}
	}
}

// Wait returns once the barrier's znode is absent: at once if it is, or
// when its watch reports its deletion (even if the barrier was held again
// since: Release lets a Wait return once it has looked), or the watch
// fires otherwise and a new look finds it gone or finds another znode than
// the Wait's first look did (a newer czxid: the barrier was released and
// held again since, while no watch of the Wait's stood at the server, as
// across a reconnect). A watch an earlier Wait left (see spares) counts
// only if it had not fired by the time this Wait's look was answered (see
// look). It fails when ctx ends (with ctx.Err()) or the session does
// (wrapping ErrLost or ErrClosed). On a shared session a Wait that ends
// leaves at most its one watch registered, which the barrier's next Wait
// reuses; it goes when the znode next changes or the session ends.
func (b *zkBarrier) Wait(ctx context.Context) error {
	err := b.call(ctx, "wait", func(s *Session) error {
		var first since
		for {
			var exists bool
			var ch <-chan zk.Event
			err := s.request(ctx, nil, nil, nil, func() (err error) {
				b.watches.looking.Lock()
				exists, ch, err = b.watches.look(s.requests, b.path, &first)
				return err
			}, func(err error) {
				if err == nil && exists {
					b.watches.keep(b.path, ch) // as a Wait that ends waiting does
				}
				b.watches.looking.Unlock()
			})
			if !errors.As(err, new(leftRunning)) {
				b.watches.looking.Unlock()
			}
			switch {
			case retryable(err):
				if !s.pause(ctx, nil) {
					return gaveUp(ctx, s)
				}
				continue
			case err != nil:
				return err
			case !exists:
				return nil
			}
			select {
			case ev := <-ch:
				if ev.Type == zk.EventNodeDeleted {
					return nil // released while this Wait was under way
				}
			case <-ctx.Done():
				b.watches.keep(b.path, ch)
				return ctx.Err()
			case <-s.quit:
				b.watches.keep(b.path, ch)
				return gaveUp(ctx, s)
			}
		}
	})
	return ctxtime.Alone(ctx, err) // ctx.Err() itself, as barrier.Barrier promises
}

// spares keeps the watches that calls set and left unfired, one per path,
// so that the next call on the path waits on it rather than register
// another: the ZooKeeper client keeps each watch until its znode changes,
// so without them every call that ends early would leave one more.
type spares struct {
	// looking is held by a Wait's look and, if the Wait left it running,
	// until its watch is kept: the next look then finds it.
	looking sync.Mutex
	mu      sync.Mutex
	m       map[string]<-chan zk.Event
}

// exists reports whether path exists, and its stat if it does, with a
// channel that fires at its next change: a spare watch on it if one is
// unfired, else a new one.
func (w *spares) exists(conn *zk.Conn, path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	if ch := w.take(path); ch != nil {
		ok, st, err := conn.Exists(path)
		if err != nil {
			w.keep(path, ch)
		}
		return ok, st, ch, err
	}
	ok, st, ch, err := conn.ExistsW(path)
	return ok, st, ch, err
}

// existing is exists for a watch wanted only while path exists: it sets
// none when path is absent (a read with a watch, which unlike an exists
// watch is not set on an absent znode), so a look that finds it absent
// leaves no watch behind. The watch's next event is of a change made
// after this look: a watch this look set, or a spare an earlier call left
// that had not fired when this look's answer came (the client hands a
// watch its event before the answer of any later request); a spare that
// had fired is dropped, and a watch set instead.
func (w *spares) existing(conn requestConn, path string) (bool, <-chan zk.Event, error) {
	return w.look(conn, path, &since{})
}

// since is the znode a caller's first look found: its czxid, once seen.
type since struct {
	czxid int64
	seen  bool
}

// same reports whether st is of the znode the first look found (it is, if
// it is the first found).
func (f *since) same(st *zk.Stat) bool {
	if !f.seen {
		f.czxid, f.seen = st.Czxid, true
	}
	return st.Czxid == f.czxid
}

// look is existing for a caller that looks more than once: it reports
// path absent also when it finds another znode than the caller's first
// look found (first), which was deleted since then. A look on a spare
// that had fired takes two requests, the spare's Exists and then a GetW;
// a znode deleted and created again between them, while no watch of the
// caller's stood at the server, is another by its czxid. Absent, it
// keeps the watch it holds as a spare.
func (w *spares) look(conn requestConn, path string, first *since) (bool, <-chan zk.Event, error) {
	if ch := w.take(path); ch != nil {
		ok, st, err := conn.Exists(path)
		if err != nil || !ok || !first.same(st) {
			w.keep(path, ch)
			return false, nil, err
		}
		select {
		case <-ch:
			// Fired for a change before this look: set a watch of our own.
		default:
			return true, ch, nil
		}
	}
	_, st, ch, err := conn.GetW(path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		return false, nil, nil
	case err != nil:
		return false, nil, err
	case !first.same(st):
		w.keep(path, ch)
		return false, nil, nil
	}
	return true, ch, nil
}

// take returns path's spare watch if it has not fired, and drops every
// spare that has.
func (w *spares) take(path string) <-chan zk.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, ch := range w.m {
		select {
		case <-ch:
			delete(w.m, p)
		default:
		}
	}
	ch := w.m[path]
	delete(w.m, path)
	return ch
}

// keep makes ch, a watch on path, its spare, unless it fired or path has
// one.
func (w *spares) keep(path string, ch <-chan zk.Event) {
	if ch == nil {
		return
	}
	select {
	case <-ch:
		return
	default:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]<-chan zk.Event)
	}
	if _, ok := w.m[path]; !ok {
		w.m[path] = ch
	}
}
