package zkio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
)

// Znode layout, as Apache Curator's recipes name their znodes with
// protection: <path>/_c_<uuid>-<marker><sequence>, where the marker is
// "lock-" for InterProcessMutex, "latch-" for LeaderLatch, "__READ__" and
// "__WRIT__" for InterProcessReadWriteLock's readers and writers, and
// sequence is the ten digits ZooKeeper appends to a sequential znode. A
// queue is ordered by sequence; znodes that do not follow the layout are not
// in it.
const protectedPrefix = "_c_"

// The markers of the znodes of each kind of queue member.
const (
	lockMarker  = "lock-"
	latchMarker = "latch-"
	readMarker  = "__READ__"
	writeMarker = "__WRIT__"
)

// member is one znode of a queue.
type member struct {
	name   string // base name
	marker string // which of the queue's markers it carries
	seq    string // the digits after the marker
}

// memberOf returns child as a member of a queue whose znodes carry one of
// markers; false if it is not one.
//
// The sequence is the name's trailing digits, and the marker what comes
// just before them: every marker ends in a non-digit. This looks at the
// name's tail alone, since a woken waiter runs it on every child of a
// queue that may be thousands long.
func memberOf(child string, markers ...string) (member, bool) {
	i := len(child)
	for i > 0 && '0' <= child[i-1] && child[i-1] <= '9' {
		i--
	}
	if i == len(child) {
		return member{}, false
	}
	for _, marker := range markers {
		if strings.HasSuffix(child[:i], marker) {
			return member{name: child, marker: marker, seq: child[i:]}, true
		}
	}
	return member{}, false
}

// isMember reports whether name is named as a member of a queue whose
// znodes carry one of markers.
func isMember(name string, markers ...string) bool {
	_, ok := memberOf(name, markers...)
	return ok
}

// inQueueOrder compares a and b by their place in the queue.
func inQueueOrder(a, b member) int { return strings.Compare(a.seq, b.seq) }

// queueOf returns the children that are members of a queue whose znodes
// carry one of markers, in queue order.
func queueOf(children []string, markers ...string) []member {
	var q []member
	for _, c := range children {
		if m, ok := memberOf(c, markers...); ok {
			q = append(q, m)
		}
	}
	slices.SortFunc(q, inQueueOrder)
	return q
}

// firstOf returns the first n members of the queue in children (see
// queueOf), in queue order, in one pass over them: a leader's read needs
// the head of a queue that may be thousands long.
func firstOf(children []string, n int, markers ...string) []member {
	q := make([]member, 0, n)
	for _, c := range children {
		m, ok := memberOf(c, markers...)
		if !ok || (len(q) == n && inQueueOrder(m, q[n-1]) >= 0) {
			continue
		}
		if len(q) == n {
			q = q[:n-1]
		}
		i, _ := slices.BinarySearchFunc(q, m, inQueueOrder)
		q = slices.Insert(q, i, m)
	}
	return q
}

// standing returns, in one pass over children, whether own (a base name)
// is in the queue of markers, and the member it waits for (ok false when
// it holds): a reader waits for the nearest member ahead that is not a
// reader (readers hold together), every other member for the one just
// ahead. The member waited for is the only one whose deletion can change
// own's standing, so a handoff wakes only the waiters it frees; and a
// waiter woken in a queue of thousands needs no more than this pass.
func standing(children []string, own string, markers ...string) (in bool, ahead member, ok bool) {
	me, isMember := memberOf(own, markers...)
	if !isMember {
		return false, member{}, false
	}
	for _, c := range children {
		if c == own {
			in = true
			continue
		}
		m, isMember := memberOf(c, markers...)
		if !isMember || inQueueOrder(m, me) >= 0 || (me.marker == readMarker && m.marker == readMarker) {
			continue
		}
		if !ok || inQueueOrder(ahead, m) < 0 {
			ahead, ok = m, true
		}
	}
	return in, ahead, ok
}

// retryable reports whether a ZooKeeper error is the connection's, not the
// request's: the request may be retried once the client reconnects. That
// includes the socket's own error, which the client gives the request
// whose write failed (a broken pipe, a write deadline): the request never
// reached ZooKeeper whole.
func retryable(err error) bool {
	var sock *net.OpError
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionMoved) || errors.As(err, &sock)
}

// retryPause is how long a caller waits before retrying a request that
// failed with the connection.
const retryPause = 50 * time.Millisecond

// pauseRetry waits before a retry; false if ctx or the service ended.
func (svc *service) pauseRetry(ctx context.Context) bool { return svc.s.pause(ctx, svc.stop) }

// pause waits retryPause before a retry; false if ctx, stop or the session
// ended first.
func (s *Session) pause(ctx context.Context, stop <-chan struct{}) bool {
	t := time.NewTimer(retryPause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-stop:
	case <-s.quit:
	}
	return false
}

// request runs req, a request of a caller's, on a session helper, and returns
// its error once it is done, or a leftRunning error once ctx ends (wrapping
// ctx's error) or the service stops (wrapping why) first: the client's
// requests take no context, and a caller that gave up does not wait on
// ZooKeeper. The request then runs on until ZooKeeper answers or the
// connection fails, and what it sets must not be read: abandoned, if not
// nil, is called with its error then, on the helper, to undo what it did.
// A request with an undo (one that writes) is counted in the service's
// requests until it and its undo are done, so that Close waits for it.
func (svc *service) request(ctx context.Context, req func() error, abandoned func(error)) error {
	var track *inflight.Counter
	if abandoned != nil {
		track = &svc.requests
	}
	return svc.s.request(ctx, svc.stop, svc.stopped, track, req, abandoned)
}

// request is service.request for any caller: stop, if not nil, ends the
// wait as the service's stop does, with stopped's error; track, if not
// nil, counts the helper while it runs.
func (s *Session) request(ctx context.Context, stop <-chan struct{}, stopped func() error, track *inflight.Counter, req func() error, abandoned func(error)) error {
	var mu sync.Mutex
	answered, left := false, false
	done := make(chan error, 1)
	track.Add()
	if !s.helper(func() {
		defer track.Done()
		err := req()
		mu.Lock()
		answered = true
		abandon := left
		mu.Unlock()
		if !abandon {
			done <- err
		} else if abandoned != nil {
			abandoned(err)
		}
	}) {
		track.Done()
		return req() // the session has ended: the client fails it at once
	}
	var why error
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		why = ctx.Err()
	case <-stop:
		why = stopped()
	}
	mu.Lock()
	defer mu.Unlock()
	if answered {
		return <-done
	}
	left = true
	return leftRunning{why}
}

// helper runs f on a session helper, counted in the service's requests
// while it runs; false (and f never runs) if the session has ended.
func (svc *service) helper(f func()) bool { return svc.s.countedHelper(&svc.requests, f) }

// leftRunning is request's error when its caller stopped waiting.
type leftRunning struct{ error }

func (l leftRunning) Unwrap() error { return l.error }

// requestConn is what a create of a queue's or a double barrier's znode,
// its lookup when the answer was lost, an acquisition's stat of its own
// znode, deleteNode and a barrier's Wait ask of the connection.
type requestConn interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Children(path string) ([]string, *zk.Stat, error)
	Multi(ops ...any) ([]zk.MultiResponse, error)
	Exists(path string) (bool, *zk.Stat, error)
	Delete(path string, version int32) error
	GetW(path string) ([]byte, *zk.Stat, <-chan zk.Event, error)
}

// create writes a new ephemeral sequential znode carrying marker in the
// queue, creating the path's missing parents, and returns its path. A create
// whose outcome is unknown (the connection broke) is looked up by its uuid
// once the client reconnects, as often as the lookup fails, before anything
// is created again; if the caller gives up first, a session helper deletes
// whatever znode carries the uuid. So no znode is left behind unknown.
func (svc *service) create(ctx context.Context, dir, marker string, data []byte) (string, error) {
	return svc.createAs(ctx, dir, marker, data, uuid.NewString())
}

// createAs is create with the uuid of the znode's protected name given:
// a semaphore's acquisition names its mutex znode and its lease with one.
func (svc *service) createAs(ctx context.Context, dir, marker string, data []byte, guid string) (string, error) {
	conn := svc.s.requests
	prefix := dir + "/" + protectedPrefix + guid + "-" + marker
	unknown := false // an attempt's outcome is unknown: its znode may exist
	giveUp := func(err error) (string, error) {
		if unknown {
			svc.helper(func() { svc.s.forgetNow(&svc.requests, dir, guid) })
		}
		return "", err
	}
	for {
		if err := svc.live(ctx); err != nil {
			return giveUp(err)
		}
		if unknown {
			var found string
			err := svc.request(ctx, func() (err error) {
				found, err = svc.findGUID(dir, guid)
				return err
			}, nil)
			switch {
			case err == nil && found != "":
				return found, nil
			case err == nil:
				unknown = false // it was not made: make it now
			case retryable(err):
				if !svc.pauseRetry(ctx) {
					return giveUp(svc.cause(ctx))
				}
				continue
			default:
				return giveUp(fmt.Errorf("zkio: look up a create in %s: %w", dir, err))
			}
		}
		var p string
		err := svc.request(ctx, func() (err error) {
			p, err = conn.Create(prefix, data, zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			return err
		}, func(err error) {
			// Given up on while it ran: what it made goes (Close
			// waits for it, the deletes tried again too).
			switch {
			case err == nil:
				svc.s.dropNode(&svc.requests, p)
			case retryable(err):
				svc.s.forgetNow(&svc.requests, dir, guid)
			}
		})
		switch {
		case err == nil:
			return p, nil
		case errors.As(err, new(leftRunning)):
			return giveUp(err) // the create, left running, cleans up after itself
		case errors.Is(err, zk.ErrNoNode):
			if err := svc.createParents(ctx, dir); err != nil {
				return giveUp(err)
			}
		case retryable(err):
			unknown = true
			if !svc.pauseRetry(ctx) {
				return giveUp(svc.cause(ctx))
			}
		default:
			return giveUp(fmt.Errorf("zkio: create in %s: %w", dir, err))
		}
	}
}

// stat asks for the znode's creation zxid, and if watched sets a watch on
// it, at once, on a session helper counted in the service's requests (see
// helper), so that the request travels with the queue's first listing (one
// round trip for both), and neither the service's Close nor the session's
// returns while it runs; the answer waits on the returned channel. Once
// the session has ended it is not sent: the answer is the client's
// zk.ErrClosing, as it would fail it.
func (svc *service) stat(node string, watched bool) <-chan statResult {
	ch := make(chan statResult, 1)
	ask := func() {
		var st *zk.Stat
		var watch <-chan zk.Event
		var err error
		if watched {
			// A read, not an exists, so that a znode already gone
			// gets no watch (see waitTurn).
			_, st, watch, err = svc.s.requests.GetW(node)
		} else {
			var ok bool
			ok, st, err = svc.s.requests.Exists(node)
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
		}
		var czxid int64
		if st != nil {
			czxid = st.Czxid
		}
		ch <- statResult{czxid, watch, err}
	}
	if !svc.helper(ask) {
		ch <- statResult{err: zk.ErrClosing}
	}
	return ch
}

type statResult struct {
	czxid int64
	watch <-chan zk.Event // fires when the znode is deleted (or changed)
	err   error
}

// own is an acquisition's knowledge of its own znode: the answer of its
// early stat, once received.
type own struct {
	node  string
	early <-chan statResult
	r     statResult
	got   bool
}

// result waits for the answer of o's stat (the early one, unless o is
// made for another), once received; false if ctx ended or the service
// stopped first (the stat, left running, is not waited for here; the
// service's Close waits for it, see stat).
func (o *own) result(ctx context.Context, svc *service) (statResult, bool) {
	if !o.got {
		select {
		case o.r = <-o.early:
			o.got = true
		case <-ctx.Done():
			return statResult{}, false
		case <-svc.stop:
			return statResult{}, false
		}
	}
	return o.r, true
}

// lostOwn is the error of an acquisition whose znode someone else deleted.
func lostOwn(node string) error {
	return fmt.Errorf("zkio: %s deleted by someone else before it held: %w", node, primitives.ErrLost)
}

// created returns the znode's creation zxid from the early stat, asking
// again while the connection is down; it waits for an answer until ctx
// ends or the service stops. On failure the znode is withdrawn.
func (svc *service) created(ctx context.Context, o *own) (int64, error) {
	r, ok := o.result(ctx, svc)
	for ok && retryable(r.err) && svc.pauseRetry(ctx) {
		o.early, o.got = svc.stat(o.node, false), false
		r, ok = o.result(ctx, svc)
	}
	switch {
	case !ok:
	case r.err == nil:
		return r.czxid, nil
	case errors.Is(r.err, zk.ErrNoNode):
		return 0, lostOwn(o.node)
	}
	svc.withdraw(o.node)
	if !ok || retryable(r.err) {
		return 0, svc.cause(ctx)
	}
	return 0, fmt.Errorf("zkio: read %s: %w", o.node, r.err)
}

// findGUID returns the znode of the queue in dir whose name carries guid,
// or "".
func (svc *service) findGUID(dir, guid string) (string, error) {
	children, _, err := svc.s.requests.Children(dir)
	if err != nil {
		return "", err
	}
	for _, c := range children {
		if strings.HasPrefix(c, protectedPrefix+guid) {
			return dir + "/" + c, nil
		}
	}
	return "", nil
}

// createParents creates dir and its missing ancestors as persistent
// znodes (Curator creates containers; either serves).
func (svc *service) createParents(ctx context.Context, dir string) error {
	run := func(req func() error) error { return svc.request(ctx, req, nil) }
	return makePath(svc.s.conn, dir, run, func() bool { return svc.pauseRetry(ctx) }, func() error { return svc.cause(ctx) })
}

// makePath creates p and its missing ancestors as persistent znodes, each
// create run by run. A request that fails with the connection is retried
// after pause; once pause returns false, makePath returns giveUp's error. A
// create run left running (a leftRunning error) is not waited for, nor
// counted for Close: the znode it may make is a persistent parent, shared
// by every primitive on the path, as it would have been had the answer
// come in time, and no decision reads it (see the package doc on Close).
func makePath(conn *zk.Conn, p string, run func(req func() error) error, pause func() bool, giveUp func() error) error {
	parts := strings.Split(p[1:], "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		for {
			err := run(func() error {
				_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
				return err
			})
			if err == nil || errors.Is(err, zk.ErrNodeExists) {
				break
			}
			if errors.As(err, new(leftRunning)) {
				return err
			}
			if !retryable(err) {
				return fmt.Errorf("zkio: create %s: %w", p, err)
			}
			if !pause() {
				return giveUp()
			}
		}
	}
	return nil
}

// live returns the reason to stop now: ctx's end (or a nil ctx) or the
// service's.
func (svc *service) live(ctx context.Context) error {
	if err := svc.stopped(); err != nil {
		return err
	}
	return driver.ContextErr(ctx)
}

// cause returns why a wait stopped: the service's end, else ctx's.
func (svc *service) cause(ctx context.Context) error {
	if err := svc.stopped(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("zkio: %s: connection to ZooKeeper lost", svc.path)
}

// withdrawWait bounds how long withdraw waits for its delete's first
// answer: a ZooKeeper that answers does so within milliseconds.
const withdrawWait = 500 * time.Millisecond

// withdraw deletes a znode this service no longer wants. A session helper
// sends the delete, and tries again while it fails with the connection
// (see forgetNode); withdraw waits for the first try's answer, so that a
// caller that gave up leaves nothing once it returns, but at most
// withdrawWait (ZooKeeper not answering, the caller does not wait on it;
// the helper goes on, and Close of the service waits for it and for the
// deletes tried again after it, see inflight.Counter), and not at all on a
// session of the service's own that Close is ending: the session's end
// deletes the znode.
func (svc *service) withdraw(node string) {
	var closing <-chan struct{}
	if svc.own {
		closing = svc.stop
	}
	tried := make(chan struct{})
	if !svc.helper(func() {
		defer close(tried)
		svc.s.dropNode(&svc.requests, node)
	}) {
		return // the session has ended, and its znodes with it
	}
	bound := time.NewTimer(withdrawWait)
	defer bound.Stop()
	select {
	case <-tried:
	case <-bound.C:
	case <-closing:
	}
}

// wait queues the znode and returns once it holds (see blocker), and
// whether it waited behind another member; with try, it returns taken at
// once if it does not hold. While it waits it watches the znode ahead and,
// once the wait is driver.WaitWatchAfter old, its own: if its own is
// deleted, it fails with an error wrapping ErrLost (at its turn, when its
// own watch is set, or at once after that). On any failure the znode is
// withdrawn.
func (svc *service) wait(ctx context.Context, o *own, try bool) (waited bool, err error) {
	err = svc.waitTurn(ctx, svc.path, svc.spec.markers, o, try, &waited)
	return waited, err
}

// waitTurn is wait in the queue in dir whose members carry markers.
func (svc *service) waitTurn(ctx context.Context, dir string, markers []string, o *own, try bool, waited *bool) error {
	conn := svc.s.conn
	node := o.node
	base := node[strings.LastIndex(node, "/")+1:]
	fail := func(err error) error {
		svc.withdraw(node)
		return err
	}
	// A wait watches its own znode only once it is WaitWatchAfter old
	// (see driver.HoldWatchAfter): a short wait's znode costs no watch,
	// and its holder's release sends its own session no event.
	var mine <-chan zk.Event // a watch on node, once due
	ownDue := time.NewTimer(driver.WaitWatchAfter(svc.s.TTL()))
	defer ownDue.Stop()
	watchOwn := false
	// look: list the queue again and watch the member now ahead. The own
	// watch, once due, is set (again, after it fired) before anything
	// else; its timer alone needs no listing, since what is ahead has not
	// changed while its watch has not fired.
	var ahead <-chan zk.Event
	for look := true; ; {
		if err := svc.live(ctx); err != nil {
			return fail(err)
		}
		if watchOwn && mine == nil {
			ch, err := svc.watchOwn(ctx, o)
			switch {
			case err == nil:
				mine = ch
			case errors.Is(err, primitives.ErrLost):
				return err
			case retryable(err) && svc.pauseRetry(ctx):
				continue
			default:
				return fail(fmt.Errorf("zkio: watch %s: %w", node, errors.Join(err, svc.cause(ctx))))
			}
		}
		if look {
			var children []string
			err := svc.request(ctx, func() (err error) {
				children, _, err = conn.Children(dir)
				return err
			}, nil)
			if err != nil {
				if retryable(err) && svc.pauseRetry(ctx) {
					continue
				}
				return fail(fmt.Errorf("zkio: list %s: %w", dir, errors.Join(err, svc.cause(ctx))))
			}
			in, blocking, waits := standing(children, base, markers...)
			switch {
			case !in:
				return lostOwn(node)
			case !waits:
				return nil
			case try:
				return fail(svc.spec.taken)
			}
			// A read with a watch: unlike an exists watch, it sets
			// none on a znode already gone (one that waited for its
			// creation would wait for good, a sequential znode's name
			// never comes back), and a handoff often deletes the znode
			// ahead between the listing and this read.
			path := dir + "/" + blocking.name
			var ch <-chan zk.Event
			err = svc.request(ctx, func() (err error) {
				_, _, ch, err = conn.GetW(path)
				return err
			}, nil)
			switch {
			case errors.Is(err, zk.ErrNoNode):
				continue
			case err != nil:
				if retryable(err) && svc.pauseRetry(ctx) {
					continue
				}
				return fail(fmt.Errorf("zkio: watch %s: %w", path, errors.Join(err, svc.cause(ctx))))
			}
			ahead, look = ch, false
			*waited = true
		}
		select {
		case <-ahead:
			svc.metrics.Woken(svc.spec.kind, 1)
			look = true
		case ev := <-mine:
			svc.metrics.Woken(svc.spec.kind, 1)
			if ev.Type == zk.EventNodeDeleted {
				return lostOwn(node)
			}
			mine, look = nil, true // changed, or no longer watched
		case <-ownDue.C:
			watchOwn = true // set at the loop's top, with no listing
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-svc.stop:
			return fail(svc.stopped())
		}
	}
}

// watchOwn sets a watch on the acquisition's own znode and returns it; its
// answer also serves created. An error wraps ErrLost if the znode is gone;
// it is the cause's (see cause) if ctx ends or the service stops before
// the answer (the request, left running, sets a watch that fires when the
// znode goes).
func (svc *service) watchOwn(ctx context.Context, o *own) (<-chan zk.Event, error) {
	r, ok := (&own{node: o.node, early: svc.stat(o.node, true)}).result(ctx, svc)
	switch {
	case !ok:
		return nil, svc.cause(ctx)
	case r.err == nil:
		o.r, o.got = r, true
		return r.watch, nil
	case errors.Is(r.err, zk.ErrNoNode):
		return nil, lostOwn(o.node)
	}
	return nil, r.err
}
