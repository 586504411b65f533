package zkio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/internal/inflight"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/driver"
)

// readyNode is the child of a double barrier's path that says its parties
// have all entered, as Curator's DistributedDoubleBarrier names it.
const readyNode = "ready"

// zkDoubleBarrier is one party of barrier.DoubleBarrier in the layout of
// Curator's DistributedDoubleBarrier: each party that entered is an
// ephemeral znode <path>/<uuid>; <path>/ready, persistent, exists once
// count parties have entered and until they have left.
type zkDoubleBarrier struct {
	path, ready, name string
	count             int
	s                 *Session
	own               bool // the party made its session and closes it
	closedErr         error
	watches           spares

	turn      chan struct{} // held by the Enter, Leave or Close under way
	closed    chan struct{} // closed when Close begins
	done      chan struct{} // closed when the party has ended
	endErr    atomic.Pointer[error]
	closeOnce sync.Once
	// requests counts the party's writes under way on session helpers
	// (joins, withdrawals, clears of a round, and what settles them; see
	// write and helper): Close waits for them, so that no znode of the
	// party's stays, or appears, once it returned.
	requests inflight.Counter

	// Held with turn.
	node string // the party's znode while it is in the barrier; "" if not
	left bool   // Leave deleted node and waits for the others
	// round is the zxid of the round the party entered: its ready's czxid,
	// which is also path's mzxid while that ready stands (see roundOver);
	// 0 if unknown.
	round int64
}

// NewDoubleBarrier returns a party of the double barrier at path for count
// parties, in the layout of Curator's DistributedDoubleBarrier: disco and
// Curator parties on one path with one count enter and leave together. It
// connects to servers with a session of its own, which Close ends; or, with
// WithSession (and nil servers), it runs on that session, and Close keeps
// it. A party is out of the barrier once its session is lost (its znode is
// ephemeral): the others do not wait for it to leave.
//
// Among disco parties count is a limit (ErrFull), kept by a transaction
// that bumps path's data version with every party's entry and withdrawal;
// a Curator party enters without it (for Curator count is a threshold), so
// a mixed group may hold more than count parties. Missing parents of path
// are created as persistent znodes; the last party to leave deletes ready
// and then path itself if it is empty. Barriers carry no tokens.
func NewDoubleBarrier(servers []string, path string, count int, opts ...Option) (barrier.DoubleBarrier, error) {
	p, o, err := barrierArgs(servers, path, opts)
	if err == nil && count < 1 {
		err = fmt.Errorf("count %d: a double barrier needs at least one party: %w", count, ErrInvalidArgument)
	}
	if err != nil {
		return nil, fmt.Errorf("zkio: new double barrier: %w", err)
	}
	d := &zkDoubleBarrier{
		path: p, ready: p + "/" + readyNode, name: "double barrier " + p, count: count,
		closedErr: fmt.Errorf("zkio: double barrier %s: %w", p, primitives.ErrClosed),
		turn:      make(chan struct{}, 1),
		closed:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	if o.session != nil {
		d.s = o.session
	} else if d.s, err = newSession(servers, o); err != nil {
		return nil, err
	}
	d.own = o.session == nil
	started := d.s.helper(func() {
		select {
		case <-d.s.done:
			d.finish(d.s.Err())
		case <-d.closed:
			d.finish(d.closedErr)
		}
	})
	if !started {
		return nil, fmt.Errorf("zkio: new double barrier: %w", d.s.Err())
	}
	return d, nil
}

// finish ends the party with err.
func (d *zkDoubleBarrier) finish(err error) {
	d.endErr.Store(&err)
	close(d.done)
}

func (d *zkDoubleBarrier) Count() int            { return d.count }
func (d *zkDoubleBarrier) Done() <-chan struct{} { return d.done }

func (d *zkDoubleBarrier) Err() error {
	select {
	case <-d.done:
		return *d.endErr.Load()
	default:
		return nil
	}
}

// take waits for the party's turn; the error is ctx's or the party's end.
func (d *zkDoubleBarrier) take(ctx context.Context) error {
	if ctx == nil {
		return driver.ContextErr(ctx)
	}
	select {
	case d.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-d.done:
		return d.Err()
	}
	if err := d.stopped(); err != nil {
		<-d.turn
		return err
	}
	return nil
}

// stopped returns why the party takes no more calls: its end, or Close
// under way; nil while it takes them.
func (d *zkDoubleBarrier) stopped() error {
	select {
	case <-d.done:
		return d.Err()
	case <-d.closed:
		return d.closedErr
	default:
		return nil
	}
}

// live returns the reason to stop now: the party's end or ctx's.
func (d *zkDoubleBarrier) live(ctx context.Context) error {
	if err := d.stopped(); err != nil {
		return err
	}
	return ctx.Err()
}

// pause waits before retrying a request that failed with the connection;
// false if ctx or the party ended first.
func (d *zkDoubleBarrier) pause(ctx context.Context) bool { return d.s.pause(ctx, d.closed) }

// gaveUp returns why a call stopped: the party's end, else ctx's.
func (d *zkDoubleBarrier) gaveUp(ctx context.Context) error {
	if err := d.stopped(); err != nil {
		return err
	}
	return gaveUp(ctx, d.s)
}

// request runs req as service.request does (nothing to undo), its wait
// ended also by Close.
func (d *zkDoubleBarrier) request(ctx context.Context, req func() error) error {
	return d.ask(ctx, req, nil)
}

// ask is request with abandoned: called on the helper with req's error
// once a req its caller left running is answered. For reads: Close does
// not wait for them (see write).
func (d *zkDoubleBarrier) ask(ctx context.Context, req func() error, abandoned func(error)) error {
	return d.s.request(ctx, d.closed, d.stopped, nil, req, abandoned)
}

// write is ask for a req that writes: it and undo (if not nil), once it
// is left running, are counted in the party's requests until done, so
// that Close waits for them.
func (d *zkDoubleBarrier) write(ctx context.Context, req func() error, undo func(error)) error {
	return d.s.request(ctx, d.closed, d.stopped, &d.requests, req, undo)
}

// helper runs f on a session helper, counted in the party's requests
// while it runs; false (and f never runs) if the session has ended.
func (d *zkDoubleBarrier) helper(f func()) bool { return d.s.countedHelper(&d.requests, f) }

// forget has a counted helper (see helper) delete node, trying again while
// the delete fails with the connection and the session lives.
func (d *zkDoubleBarrier) forget(node string) { d.s.forgetNode(&d.requests, node) }

// leftBehind reports whether err is that of a request its caller left
// running.
func leftBehind(err error) bool { return errors.As(err, new(leftRunning)) }

// requester is request for ctx, as makePath's run.
func (d *zkDoubleBarrier) requester(ctx context.Context) func(req func() error) error {
	return func(req func() error) error { return d.request(ctx, req) }
}

// fail says what failed; ctx's end first if it ended.
func (d *zkDoubleBarrier) fail(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, barrier.ErrFull), errors.Is(err, barrier.ErrEntered), errors.Is(err, barrier.ErrNotEntered):
		return fmt.Errorf("zkio: %s: %w", d.name, err)
	case ctxtime.EndedBy(ctx, err) != nil:
		return ctxtime.EndedBy(ctx, err) // ctx.Err() itself, as barrier.DoubleBarrier promises
	}
	return fmt.Errorf("zkio: %s: %s: %w", d.name, what, ctxFirst(ctx, err))
}

// members returns path's children that are parties, sorted by name as
// Curator sorts them, whether ready exists, and path's data version and
// mzxid; no parties if path does not exist (version -2).
func (d *zkDoubleBarrier) members() (kids []string, ready bool, version int32, mzxid int64, err error) {
	kids, st, err := d.s.requests.Children(d.path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, false, -2, 0, nil
	}
	if err != nil {
		return nil, false, 0, 0, err
	}
	ready = slices.Contains(kids, readyNode)
	kids = slices.DeleteFunc(kids, func(k string) bool { return k == readyNode })
	slices.Sort(kids)
	return kids, ready, st.Version, st.Mzxid, nil
}

// Enter creates the party's znode unless ready exists or count parties are
// in (ErrFull), then waits for ready, creating it if its znode made the
// count. An Enter whose ctx ends withdraws its znode and returns ctx.Err(),
// unless ready was created first: then it has entered and returns nil. An
// Enter that gives up not knowing whether its znode was made (the answer
// was lost, and the lookups after it fail) ends the same way.
//
// Enter waits for ZooKeeper only until ctx ends or Close begins: each of
// its requests runs as Session.request runs it, and one ZooKeeper has not
// answered by then is left running. The withdrawal then waits
// withdrawWait at most for its answers (the connection down, it tries
// again meanwhile); past that, Enter returns ctx's error, and a session
// helper finishes the withdrawal once ZooKeeper answers, while the session
// lives (see settle): the znode goes, even if a party counted it
// meanwhile (the Enter has failed). A join left running is withdrawn so
// too, once answered. Close on a shared session waits for both (see
// Close).
func (d *zkDoubleBarrier) Enter(ctx context.Context) error {
	if err := d.take(ctx); err != nil {
		return d.fail(ctx, "enter", err)
	}
	defer func() { <-d.turn }()
	if d.node != "" {
		return d.fail(ctx, "enter", barrier.ErrEntered)
	}
	if err := d.join(ctx); err != nil {
		if d.node != "" && d.withdraw() {
			return nil // the znode was made, and a party counted it in
		}
		return d.fail(ctx, "enter", err)
	}
	err := d.awaitReady(ctx)
	if err == nil || d.node != "" && d.withdraw() {
		return nil
	}
	return d.fail(ctx, "enter", err)
}

// join creates the party's znode, in one transaction with a write of
// path's data at the version its listing had: so no two disco parties both
// take the last place. A transaction whose answer was lost is looked up
// (does the znode exist?) as often as the lookup fails, before the round
// is listed again, since the listing would count the znode. If the caller
// gives up first, join returns its error with node set to the znode, which
// may exist and may be counted already: Enter withdraws it, guarded (see
// withdraw), never by a plain delete; a transaction left running settles
// its znode itself once answered (see settle), and join leaves node unset.
func (d *zkDoubleBarrier) join(ctx context.Context) error {
	conn := d.s.requests
	node := d.path + "/" + uuid.NewString()
	unknown := false // a transaction's outcome is unknown: node may exist
	giveUp := func(err error) error {
		if unknown {
			d.node, d.left = node, false
		}
		return err
	}
	for {
		if err := d.live(ctx); err != nil {
			return giveUp(err)
		}
		if unknown {
			var ok bool
			err := d.request(ctx, func() (err error) {
				ok, _, err = conn.Exists(node)
				return err
			})
			switch {
			case err == nil && ok:
				d.node, d.left = node, false
				return nil
			case err == nil:
				unknown = false // not made: list and try again
			case retryable(err):
				if !d.pause(ctx) {
					return giveUp(d.gaveUp(ctx))
				}
				continue
			default:
				return giveUp(err) // a lookup left running writes nothing
			}
		}
		var kids []string
		var ready bool
		var version int32
		err := d.request(ctx, func() (err error) {
			kids, ready, version, _, err = d.members()
			return err
		})
		switch {
		case retryable(err):
			if !d.pause(ctx) {
				return d.gaveUp(ctx)
			}
			continue
		case err != nil:
			return err
		case version == -2:
			if err := makePath(d.s.conn, d.path, d.requester(ctx), func() bool { return d.pause(ctx) }, func() error { return d.gaveUp(ctx) }); err != nil {
				return err
			}
			continue
		case ready && len(kids) == 0:
			// A round whose parties all died (or are deleting it): ready
			// says nothing now. A clear left running goes on.
			if err := d.write(ctx, func() error { return d.clear(version) }, nil); leftBehind(err) {
				return err
			}
			continue
		case ready || len(kids) >= d.count:
			return barrier.ErrFull
		}
		err = d.write(ctx, func() error {
			_, err := conn.Multi(&zk.SetDataRequest{Path: d.path, Version: version},
				&zk.CreateRequest{Path: node, Acl: zk.WorldACL(zk.PermAll), Flags: zk.FlagEphemeral})
			return err
		}, func(err error) {
			// Given up on while it ran: what it (or an earlier try whose
			// answer was lost) may have made goes.
			if err == nil || errors.Is(err, zk.ErrNodeExists) || retryable(err) {
				d.settle(node)
			}
		})
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			// Created; or created by a try whose answer was lost.
			d.node, d.left = node, false
			return nil
		case leftBehind(err):
			return err // settled once answered, see above
		case retryable(err):
			unknown = true
			if !d.pause(ctx) {
				return giveUp(d.gaveUp(ctx))
			}
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			// Another party came or went, or path went: look again.
		default:
			return err
		}
	}
}

// awaitReady waits until ready exists, and creates it once the party's
// listing counts count parties (see makeReady); it records the round. A
// look for ready or a create of it left running once ctx ended is not
// waited for: Enter's withdrawal, sent after it, learns whether ready
// counted the party.
func (d *zkDoubleBarrier) awaitReady(ctx context.Context) error {
	for {
		var exists bool
		var st *zk.Stat
		var ch <-chan zk.Event
		err := d.ask(ctx, func() (err error) {
			exists, st, ch, err = d.watches.exists(d.s.conn, d.ready)
			return err
		}, func(error) { d.watches.keep(d.ready, ch) })
		if leftBehind(err) {
			return err
		}
		if exists && st != nil {
			d.round = st.Czxid
		}
		if err == nil && !exists {
			var round int64
			err = d.write(ctx, func() (err error) {
				round, err = d.makeReady()
				return err
			}, nil)
			switch {
			case err == nil:
				exists, d.round = true, round
			case errors.Is(err, errNotYet):
				err = nil
			case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNodeExists):
				d.watches.keep(d.ready, ch) // look again
				continue
			}
		}
		if err != nil || exists {
			d.watches.keep(d.ready, ch)
		}
		switch {
		case leftBehind(err):
			return err
		case retryable(err):
			if !d.pause(ctx) {
				return d.gaveUp(ctx)
			}
			continue
		case err != nil:
			return err
		case exists:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			d.watches.keep(d.ready, ch)
			return ctx.Err()
		case <-d.closed:
			d.watches.keep(d.ready, ch)
			return d.closedErr
		case <-d.s.quit:
			return d.s.Err()
		}
	}
}

// errNotYet says fewer than count parties are in.
var errNotYet = errors.New("fewer parties than the count")

// makeReady creates ready if count parties are in, in one transaction with
// a write of path's data at its listing's version: so ready never counts a
// disco party that withdrew meanwhile. It returns the transaction's zxid,
// ready's czxid (0 if the answer lacks it). errNotYet if fewer are in;
// zk.ErrBadVersion if a party came or went since the listing;
// zk.ErrNodeExists if a party that writes no version (Curator's) made
// ready.
func (d *zkDoubleBarrier) makeReady() (int64, error) {
	kids, _, version, _, err := d.members()
	switch {
	case err != nil:
		return 0, err
	case len(kids) < d.count:
		return 0, errNotYet
	}
	res, err := d.s.conn.Multi(&zk.SetDataRequest{Path: d.path, Version: version},
		&zk.CreateRequest{Path: d.ready, Acl: zk.WorldACL(zk.PermAll)})
	if err != nil {
		return 0, err
	}
	if len(res) > 0 && res[0].Stat != nil {
		return res[0].Stat.Mzxid, nil
	}
	return 0, nil
}

// withdrawal is what a try of a withdrawal found.
type withdrawal int

const (
	withdrawn withdrawal = iota // the znode is gone, or was never made: not counted
	counted                     // ready stands, and counted the znode
	again                       // a party came or went meanwhile: try again
)

// withdrawTry is one try of node's withdrawal (see withdraw): it lists the
// barrier and, unless ready stands, deletes node in one transaction with a
// write of path's data at the listing's version. Counted, it returns
// path's mzxid then too: ready's czxid while it stands, if a disco party
// made it (see roundOver).
func (d *zkDoubleBarrier) withdrawTry(node string) (withdrawal, int64, error) {
	kids, ready, version, mzxid, err := d.members()
	switch {
	case err != nil:
		return 0, 0, err
	case ready && slices.Contains(kids, node[len(d.path)+1:]):
		return counted, mzxid, nil
	case ready, version == -2:
		return withdrawn, 0, nil // not made, or gone; or path is gone, and node with it
	}
	_, err = d.s.requests.Multi(&zk.SetDataRequest{Path: d.path, Version: version},
		&zk.DeleteRequest{Path: node, Version: -1})
	switch {
	case err == nil, errors.Is(err, zk.ErrNoNode):
		return withdrawn, 0, nil // deleted, or gone already (path cannot go before it)
	case errors.Is(err, zk.ErrBadVersion):
		return again, 0, nil
	}
	return 0, 0, err
}

// withdraw deletes the party's znode, in one transaction with a write of
// path's data at the version of a listing without ready, so that no ready
// created meanwhile counts it; true if ready came first and the listing
// has the znode: the party has entered (its round recorded), and keeps
// its znode. The znode need not exist (a join whose outcome is unknown):
// then it returns false. It waits withdrawWait at most, trying again while
// the connection is down, and not past Close; then it returns false, the
// party out, and a session helper goes on (see settle), or Close deletes
// the znode: so a party's znode is never left under a live session.
func (d *zkDoubleBarrier) withdraw() (entered bool) {
	node := d.node
	d.node = ""
	ctx, cancel := context.WithTimeout(context.Background(), withdrawWait)
	defer cancel()
	for {
		var found withdrawal
		var round int64
		err := d.write(ctx, func() (err error) {
			found, round, err = d.withdrawTry(node)
			return err
		}, func(err error) { d.settleFrom(node, found, err) })
		switch {
		case err == nil && found == counted:
			d.node, d.round = node, round
			return true
		case err == nil && found == again:
			continue
		case err == nil:
			return false
		case retryable(err) && d.pause(ctx):
			continue
		}
		switch {
		case d.stopped() != nil:
			d.node = node // Close deletes it (see Close)
		case leftBehind(err):
			// The try left running settles it.
		case retryable(err):
			d.helper(func() { d.settle(node) })
		default:
			d.forget(node)
		}
		return false
	}
}

// settle withdraws node, for an Enter that gave up before the withdrawal
// (or the join) was answered, on a session helper while the session lives:
// as withdraw does, trying again while the connection is down; but a znode
// found counted (a party made ready counting it before the withdrawal) is
// deleted all the same, as its Enter has failed, and the round is cleared
// if that left it with no party (see tidy). Helper.
func (d *zkDoubleBarrier) settle(node string) {
	found, _, err := d.withdrawTry(node)
	d.settleFrom(node, found, err)
}

// settleFrom is settle once a try found found, or failed with err. Helper.
func (d *zkDoubleBarrier) settleFrom(node string, found withdrawal, err error) {
	for {
		switch {
		case err == nil && found == counted:
			if _, err := d.s.deleteNode(context.Background(), nil, node, true); err == nil {
				d.tidy()
			}
			return
		case err == nil && found == withdrawn:
			return
		case err == nil: // again
		case !retryable(err):
			_, _ = d.s.deleteNode(context.Background(), nil, node, true)
			return
		case !d.s.sleep(retryPause):
			return // the session ended, and its znodes with it
		}
		found, _, err = d.withdrawTry(node)
	}
}

// tidy clears the round if ready stands with no party, trying again while
// the connection is down and the session lives. Helper.
func (d *zkDoubleBarrier) tidy() {
	for {
		kids, ready, version, _, err := d.members()
		if err == nil && ready && len(kids) == 0 {
			err = d.clear(version)
		}
		if !retryable(err) || !d.s.sleep(retryPause) {
			return
		}
	}
}

// Leave follows Curator's algorithm: the party with the lowest znode waits
// for the highest, every other deletes its znode and waits for the lowest;
// the lowest deletes its own once it is alone. A party that deleted its own
// (a Leave whose ctx ended) waits for the lowest until none is left, also
// when it is the only one left (where Curator's returns), or until its
// round's ready is gone: the parties there now are of a later round (see
// roundOver). The last party to see the barrier empty deletes ready and
// then path, if empty (see clear).
//
// Leave waits for ZooKeeper only until ctx ends or Close begins, as Enter
// does: a request left running then writes what Leave asked of it (its
// delete of the party's znode: a later Leave finds the party out) or
// nothing (a listing, a look). A Leave that finds every party gone has
// left: it returns nil, its clear of the round left running if ctx ends
// first (and, if the connection fails it, tried again while the session
// lives).
func (d *zkDoubleBarrier) Leave(ctx context.Context) error {
	if err := d.take(ctx); err != nil {
		return d.fail(ctx, "leave", err)
	}
	defer func() { <-d.turn }()
	if d.node == "" {
		return d.fail(ctx, "leave", barrier.ErrNotEntered)
	}
	if err := d.leave(ctx); err != nil {
		return d.fail(ctx, "leave", err)
	}
	return nil
}

func (d *zkDoubleBarrier) leave(ctx context.Context) error {
	conn := d.s.conn
	name := d.node[len(d.path)+1:]
	for {
		if err := d.live(ctx); err != nil {
			return err
		}
		var kids []string
		var ready bool
		var version int32
		var mzxid int64
		err := d.request(ctx, func() (err error) {
			kids, ready, version, mzxid, err = d.members()
			return err
		})
		if err != nil {
			if retryable(err) && d.pause(ctx) {
				continue
			}
			return errors.Join(err, d.gaveUp(ctx))
		}
		if len(kids) == 0 {
			d.node, d.left, d.round = "", false, 0
			d.endRound(ctx, ready, version)
			return nil
		}
		i := slices.Index(kids, name)
		if i < 0 && !d.left {
			// Someone else deleted our znode: we are out.
			d.left = true
		}
		if d.left {
			var over bool
			round := d.round
			err := d.request(ctx, func() (err error) {
				over, err = d.roundOver(round, ready, mzxid)
				return err
			})
			switch {
			case leftBehind(err):
				return err
			case retryable(err):
				if !d.pause(ctx) {
					return d.gaveUp(ctx)
				}
				continue
			case err != nil:
				return err
			case over:
				d.node, d.left, d.round = "", false, 0
				return nil
			}
		}
		var watched string
		switch {
		case !d.left && len(kids) == 1:
			if err := d.remove(ctx, d.node); err != nil {
				return err
			}
			d.left = true
			continue
		case !d.left && i == 0:
			watched = kids[len(kids)-1]
		default:
			watched = kids[0]
			if !d.left {
				if err := d.remove(ctx, d.node); err != nil {
					return err
				}
				d.left = true
			}
		}
		watched = d.path + "/" + watched
		var exists bool
		var ch <-chan zk.Event
		err = d.ask(ctx, func() (err error) {
			exists, ch, err = d.watches.existing(conn, watched)
			return err
		}, func(error) { d.watches.keep(watched, ch) })
		switch {
		case leftBehind(err):
			return err
		case retryable(err):
			if !d.pause(ctx) {
				return d.gaveUp(ctx)
			}
			continue
		case err != nil:
			return err
		case !exists:
			d.watches.keep(watched, ch)
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			d.watches.keep(watched, ch)
			return ctx.Err()
		case <-d.closed:
			d.watches.keep(watched, ch)
			return d.closedErr
		case <-d.s.quit:
			return d.s.Err()
		}
	}
}

// endRound ends a round the party saw empty, as a Leave that finds no party
// does: it clears ready, if the listing found it (at version), else it
// deletes path unless a party joined since. A clear left running once ctx
// ends, or failed with the connection, is tried again by a session helper
// (see tidy).
func (d *zkDoubleBarrier) endRound(ctx context.Context, ready bool, version int32) {
	err := d.write(ctx, func() error {
		if ready {
			return d.clear(version)
		}
		if version != -2 {
			_ = d.s.conn.Delete(d.path, version) // unless a party joined since
		}
		return nil
	}, func(err error) {
		if retryable(err) {
			d.tidy()
		}
	})
	if retryable(err) {
		d.helper(d.tidy)
	}
}

// roundOver reports whether the round the party entered (round, see
// zkDoubleBarrier.round) is over, given whether a listing of path found ready and path's mzxid then. The round
// is over once its ready is gone (ready is deleted only when none of its
// parties is left, see clear): the parties there now are of a later round.
// No disco party writes path's data while a ready stands, so path's mzxid
// stays the round's (ready's czxid, if a disco party made ready) as long
// as the round's ready stands; if it differs, ready is looked up: if the
// round's ready stands after the listing, it stood at the listing (it was
// made before the party entered), and the parties listed are the round's.
func (d *zkDoubleBarrier) roundOver(round int64, ready bool, mzxid int64) (bool, error) {
	switch {
	case !ready:
		return true, nil
	case round == 0 || mzxid == round:
		return false, nil
	}
	ok, st, err := d.s.conn.Exists(d.ready)
	if err != nil {
		return false, err
	}
	return !ok || st.Czxid != round, nil
}

// clear deletes ready, in one transaction with a write of path's data at
// the version of a listing that found no party (so not once a disco party
// has joined since), and then path if it is empty; the error is the
// transaction's. Best effort: a ready left with no party is cleared by the
// next party to join.
func (d *zkDoubleBarrier) clear(version int32) error {
	_, err := d.s.conn.Multi(&zk.SetDataRequest{Path: d.path, Version: version},
		&zk.DeleteRequest{Path: d.ready, Version: -1})
	if err == nil {
		_ = d.s.conn.Delete(d.path, -1) // fails if a party joined since: it stays
	}
	return err
}

// remove deletes the party's own znode, retrying while the connection is
// down; a delete left running once ctx ends deletes it all the same (a
// later Leave finds the party out).
func (d *zkDoubleBarrier) remove(ctx context.Context, node string) error {
	err := d.write(ctx, func() error {
		_, err := d.s.deleteNode(ctx, d.closed, node, true)
		return err
	}, nil)
	if retryable(err) {
		return d.gaveUp(ctx) // the pause before another try was cut short
	}
	return err
}

// Close takes the party out of the barrier (it withdraws its znode, if it
// has one) and ends it; on its own session it ends the session too. On a
// shared session it also waits, within closeTimeout, for the writes its
// Enter and Leave calls left running (a join, a withdrawal, a clear of the
// round) and for what settles them (see write): once it returns, no znode
// of the party's is left, nor appears later. A create of a missing parent
// of path left running is not waited for (see makePath): what it makes is
// no party's. Its error is a primitive's
// Close's (see service.Close). A second Close returns an error wrapping
// primitives.ErrClosed.
func (d *zkDoubleBarrier) Close() error {
	first := false
	d.closeOnce.Do(func() { first = true })
	if !first {
		<-d.done
		return fmt.Errorf("zkio: %s: already closed: %w", d.name, primitives.ErrClosed)
	}
	select {
	case <-d.done:
	default:
		close(d.closed)
	}
	d.turn <- struct{}{} // Enter and Leave under way see closed and return
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	var err error
	if d.node != "" && !d.left && d.s.Err() == nil {
		if _, derr := d.s.deleteNode(ctx, nil, d.node, !d.own); derr != nil {
			// ZooKeeper does not answer: nothing more is asked of it.
			if !d.own {
				// Close tried for its whole bound: the helper that
				// goes on is not waited for (nil counter).
				d.s.forgetNode(nil, d.node)
				err = leftNode(d.name, d.node, derr)
			}
		} else if kids, ready, version, _, err := d.members(); err == nil && ready && len(kids) == 0 {
			// The last party of a round to close without leaving clears
			// it, as the last Leave does.
			_ = d.clear(version)
		}
	}
	d.node = ""
	// On its own session, ending the session deletes what the writes
	// left running made, and waits for them (see Session.Close).
	if !d.own && !d.requests.Wait(ctx) {
		err = errors.Join(err, unansweredAtClose(d.name))
	}
	<-d.turn
	if d.own {
		err = d.s.closeOwn()
	}
	<-d.done
	return err
}
