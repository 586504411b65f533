package zkio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

// leaderState is an election service's view of who leads. The service
// follows the election only while someone listens (listeners: its
// subscriptions and observations); then the loop keeps the view from the
// reads of its session's follow of the path (leaderFollow), which it
// shares with the session's other listened-to services there. A candidate
// nobody listens to only waits for its own turn, and costs no watch of
// who leads.
type leaderState struct {
	listeners *driver.Listeners

	// Loop only.
	follow    *leaderFollow       // the follow reading for the service; nil while it is not followed
	view      election.Leadership // the leader last published (zero: none yet, or nobody leads)
	seen      uint64              // reads numbered below are not applied (see Session.leaderAsked)
	observers *actor.Fanout[election.Leadership]
	waiting   []observeReq
}

type observeReq struct {
	after uint64
	r     actor.Reply[<-chan election.Leadership]
}

func (ls *leaderState) init(svc *service) {
	ls.observers = actor.NewFanout(func(election.Leadership) bool { return true })
	// The count turns from none to some, or back, on the goroutine of a
	// Subscribe, an Observe or a context's end; the loop then reads it.
	ls.listeners = driver.NewListeners(func() { svc.s.post(svc.relisten) })
}

// end closes every observation. Loop only.
func (ls *leaderState) end() {
	if ls.observers == nil {
		return
	}
	ls.answerWaiting()
	ls.observers.Close()
}

// answerWaiting answers every observation still waiting for a read with a
// closed channel: the service ended, or their contexts did. Loop only.
func (ls *leaderState) answerWaiting() {
	for _, w := range ls.waiting {
		w.r.Answer(driver.Closed[election.Leadership](), nil)
	}
	ls.waiting = nil
}

// relisten follows the election while someone listens to the service and
// it lives, and stops following otherwise. Loop only.
func (svc *service) relisten() {
	ls := &svc.leader
	switch want := ls.listeners.Listening() && !svc.Ended(); {
	case want && ls.follow == nil:
		svc.s.followLeader(svc)
	case !want && ls.follow != nil:
		svc.s.unfollowLeader(svc)
	}
}

// leaderFollow is a session's one reader of who leads the election at
// path, for all the session's services on path that someone listens to:
// one watch at a time, and one read per change, however many candidates
// the session runs there. It watches what can change who leads: the
// leader's znode (deleted, or its value proclaimed) while someone leads,
// the path's children while nobody does (the queue's next znode always
// comes after those in it, so no newcomer overtakes a leader).
type leaderFollow struct {
	path string
	poke chan struct{} // a fresh read is asked for, or want changed

	mu      sync.Mutex
	want    bool               // someone listens: the helper goes on
	running bool               // a helper runs (readLeaders)
	parked  [2]<-chan zk.Event // the watches a helper left armed when it stopped

	// Loop only.
	services map[*service]struct{}
}

// followLeader makes the session's follow of svc's path read for svc,
// starting it if need be. The first read applied to svc is one started
// after this call. Loop only.
func (s *Session) followLeader(svc *service) {
	f := s.follows[svc.path]
	if f == nil {
		f = &leaderFollow{path: svc.path, poke: make(chan struct{}, 1), services: map[*service]struct{}{}}
		s.follows[svc.path] = f
	}
	f.services[svc] = struct{}{}
	svc.leader.follow = f
	svc.leader.seen = s.leaderAsked.Add(1)
	f.mu.Lock()
	f.want = true
	start := !f.running
	f.running = f.running || s.helper(func() { s.readLeaders(f) })
	f.mu.Unlock()
	if !start {
		f.kick()
	}
}

// unfollowLeader stops reading for svc, and stops the follow once it
// reads for nobody. Observations still waiting for a read are answered
// with a closed channel: their contexts ended, or the service did. Loop
// only.
func (s *Session) unfollowLeader(svc *service) {
	f := svc.leader.follow
	svc.leader.follow = nil
	svc.leader.answerWaiting()
	delete(f.services, svc)
	if len(f.services) > 0 {
		return
	}
	f.mu.Lock()
	f.want = false
	f.mu.Unlock()
	f.kick()
}

// ask asks f for a fresh read and returns its number: every read applied
// with at least that number started after the ask. Loop only.
func (s *Session) ask(f *leaderFollow) uint64 {
	n := s.leaderAsked.Add(1)
	f.kick()
	return n
}

func (f *leaderFollow) kick() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// goOn reports whether the helper goes on reading; if not, it is no
// longer running and leaves w, its watches, to the next helper if they
// are armed. Helper.
func (f *leaderFollow) goOn(w [2]<-chan zk.Event, armed bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.want {
		return true
	}
	f.running, f.parked = false, [2]<-chan zk.Event{}
	if armed {
		f.parked = w
	}
	return false
}

// fired reports whether a watch of w has fired (or ended). It reads the
// event it finds: go-zookeeper sends one event per watch and then closes
// the channel, so a fired watch has nothing left for anyone else to read,
// and its caller only asks whether the watch is still armed.
func fired(w [2]<-chan zk.Event) bool {
	for _, ch := range w {
		if ch == nil {
			continue
		}
		select {
		case <-ch:
			return true
		default:
		}
	}
	return false
}

// readLeaders is f's helper: it reads who leads whenever a watch fires or
// the loop asks, and hands each read to the loop, until nobody listens or
// the session ends. Only a read after a watch fired (or failed) sets a new
// one: the client keeps every watch until it fires, so a read the loop
// asks for leaves the armed one to report the next change. A watch left
// armed by an earlier helper (the client cannot remove it) is taken over,
// not set again. Helper.
//
// A read a watch set off costs one request as a rule, not a listing of
// the queue: the listing that set the watch of the leader's znode also
// named the first of those queued after it (queued), and a newcomer
// queues after them all, so once the leader's znode is gone the first of
// them that still exists leads.
func (s *Session) readLeaders(f *leaderFollow) {
	f.mu.Lock()
	w := f.parked
	f.parked = [2]<-chan zk.Event{}
	f.mu.Unlock()
	armed := w != [2]<-chan zk.Event{} && !fired(w)
	fresh := true
	var queued []string // the watched leader's znode and the next ones queued after it, while it is watched
	for {
		select {
		case <-f.poke:
			fresh = true
		default:
		}
		if !f.goOn(w, armed) {
			s.post(func() { s.followStopped(f) })
			return
		}
		// A read that a watch set off needs no sync: the server that
		// sent the event has applied the change, and the client never
		// reads from a server behind what it has seen.
		n := s.leaderAsked.Load()
		var l election.Leadership
		var nw [2]<-chan zk.Event
		var err error
		found := false
		if !armed && !fresh && len(queued) > 0 {
			l, nw, queued, found, err = walkLeader(s.conn, f.path, queued)
		}
		if err == nil && !found {
			var q []string
			l, nw, q, err = readLeader(s.conn, f.path, !armed, fresh)
			if !armed {
				queued = q
			}
		}
		if err != nil {
			if !retryable(err) && !errors.Is(err, zk.ErrClosing) {
				s.log.Debug("zkio: read leader: " + err.Error())
			}
			if !armed {
				w, queued = [2]<-chan zk.Event{}, nil
			}
			if !s.sleep(retryPause) {
				return
			}
			continue
		}
		if !armed {
			w, armed = nw, true
		}
		fresh = false
		s.post(func() { s.leaderRead(f, n, l) })
		select {
		case <-w[0]:
			armed, queued = false, nil
			s.post(func() { s.leaderWoken(f) })
		case ev := <-w[1]:
			armed = false
			switch {
			case ev.Type == zk.EventNodeDeleted && len(queued) > 0:
				queued = queued[1:]
			case ev.Type != zk.EventNodeDataChanged:
				queued = nil
			}
			s.post(func() { s.leaderWoken(f) })
		case <-f.poke:
			fresh = true
		case <-s.quit:
			return
		}
	}
}

// queuedKept is how many znode names of the queue a follow keeps, from
// the leader's on (see readLeaders).
const queuedKept = 16

// walkLeader finds who leads the election at path from queued, the znodes
// of the queue that a listing showed in order, the leader's first, whose
// znodes before the first of queued are all gone: the first of them that
// still exists leads, and is watched. It returns queued from that one on;
// found is false (and the rest nil) if none exists.
func walkLeader(conn *zk.Conn, path string, queued []string) (election.Leadership, [2]<-chan zk.Event, []string, bool, error) {
	for i, name := range queued {
		node := path + "/" + name
		data, st, ch, err := conn.GetW(node)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return election.Leadership{}, [2]<-chan zk.Event{}, nil, false, err
		}
		l := election.Leadership{Key: node, Value: string(data), FencingToken: fencing.Token(st.Czxid),
			LeaseID: st.EphemeralOwner, Created: st.Czxid}
		return l, [2]<-chan zk.Event{nil, ch}, queued[i:], true, nil
	}
	return election.Leadership{}, [2]<-chan zk.Event{}, nil, false, nil
}

// followStopped forgets f once its helper stopped and nobody listens,
// unless the watch it left armed has not fired: the next follow of the
// path takes that over, so that following and stopping again and again
// does not pile up watches the client cannot remove. Loop only.
func (s *Session) followStopped(f *leaderFollow) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.running || len(f.services) > 0 || !fired(f.parked) && f.parked != [2]<-chan zk.Event{} {
		return
	}
	if s.follows[f.path] == f {
		delete(s.follows, f.path)
	}
}

// leaderRead applies read number n of f to the services it reads for.
// Loop only.
func (s *Session) leaderRead(f *leaderFollow, n uint64, l election.Leadership) {
	for svc := range f.services {
		svc.leaderRead(n, l)
	}
}

// leaderWoken counts a watch of f that fired as one wakeup, on each
// metrics its services report to. Loop only.
func (s *Session) leaderWoken(f *leaderFollow) {
	var counted []*metrics.Metrics
	for svc := range f.services {
		if m := svc.metrics; !slices.Contains(counted, m) {
			counted = append(counted, m)
			m.Woken(svc.spec.kind, 1)
		}
	}
}

// leaderRead applies read number n, unless a later one was applied or the
// read started before the service was last followed: it publishes
// LeaderChanged and the observers' update if the leader differs from the
// last one published, and answers the observations the read is fresh
// enough for. Loop only.
func (svc *service) leaderRead(n uint64, l election.Leadership) {
	ls := &svc.leader
	if svc.Ended() || n < ls.seen {
		return
	}
	ls.seen = n
	if l != ls.view {
		ls.view = l
		svc.metrics.LeaderChanged()
		svc.Publish(primitives.LeaderChanged{Key: l.Key, Value: l.Value, Token: l.FencingToken})
		ls.observers.Publish(l)
	}
	kept := ls.waiting[:0]
	for _, w := range ls.waiting {
		if n >= w.after {
			w.r.Answer(ls.observers.Subscribe(w.r.Context(), l), nil)
		} else {
			kept = append(kept, w)
		}
	}
	ls.waiting = kept
}

// observe returns a channel of who leads: first the state when observe was
// called (from a read started after it), then every change. The service is
// followed while ctx lives.
func (svc *service) observe(ctx context.Context) <-chan election.Leadership {
	if ctx == nil {
		return driver.Closed[election.Leadership]()
	}
	svc.leader.listeners.Join(ctx)
	ch, err := call(ctx, svc, func(r actor.Reply[<-chan election.Leadership]) {
		svc.relisten()
		f := svc.leader.follow
		if svc.stopped() != nil || f == nil {
			// Done, or ctx ended already.
			r.Answer(driver.Closed[election.Leadership](), nil)
			return
		}
		svc.leader.waiting = append(svc.leader.waiting, observeReq{after: svc.s.ask(f), r: r})
	})
	if err != nil {
		return driver.Closed[election.Leadership]()
	}
	return ch
}

// currentLeader reads who leads now, on the caller's goroutine.
func (svc *service) currentLeader(ctx context.Context) (election.Leadership, error) {
	for {
		if err := svc.live(ctx); err != nil {
			return election.Leadership{}, err
		}
		l, _, _, err := readLeader(svc.s.conn, svc.path, false, true)
		switch {
		case err == nil && l.Key == "":
			return l, election.ErrNoLeader
		case err == nil:
			return l, nil
		case retryable(err) && svc.pauseRetry(ctx):
			continue
		}
		return l, fmt.Errorf("zkio: read leader of %s: %w", svc.path, errors.Join(err, svc.cause(ctx)))
	}
}

// readLeader reads who leads the election at path now: the first znode of
// the "latch" queue, its data and its czxid. A zero Leadership means
// nobody leads. With fresh, sync first makes the read no older than any
// change completed before it started, whichever server answers. With
// watch, it also watches what can change the answer (see leaderFollow):
// the leader's znode, or while nobody leads the path's children (or the
// path's creation); the watches are returned, nil if none. queued names
// the queue's first queuedKept znodes, the leader's first.
func readLeader(conn *zk.Conn, path string, watch, fresh bool) (_ election.Leadership, _ [2]<-chan zk.Event, queued []string, _ error) {
	var w [2]<-chan zk.Event // the path's children (or its creation); the leader's znode
	if fresh {
		if _, err := conn.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return election.Leadership{}, w, nil, err
		}
	}
	for {
		children, _, err := conn.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			if !watch || w[0] != nil {
				// A watch of the children fires on the path's deletion.
				return election.Leadership{}, w, nil, nil
			}
			var exists bool
			var ch <-chan zk.Event
			exists, _, ch, err = conn.ExistsW(path)
			if err == nil && exists {
				continue // created meanwhile (ch fires at its next change of data, if ever)
			}
			w[0] = ch
			return election.Leadership{}, w, nil, err
		}
		if err != nil {
			return election.Leadership{}, w, nil, err
		}
		q := firstOf(children, queuedKept, latchMarker)
		if len(q) == 0 && watch && w[0] == nil {
			// Nobody leads: the next candidate's znode is the change.
			children, _, w[0], err = conn.ChildrenW(path)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return election.Leadership{}, w, nil, err
			}
			q = firstOf(children, queuedKept, latchMarker)
		}
		if len(q) == 0 {
			return election.Leadership{}, w, nil, nil
		}
		node := path + "/" + q[0].name
		var data []byte
		var st *zk.Stat
		if watch {
			data, st, w[1], err = conn.GetW(node)
		} else {
			data, st, err = conn.Get(node)
		}
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return election.Leadership{}, w, nil, err
		}
		l := election.Leadership{Key: node, Value: string(data), FencingToken: fencing.Token(st.Czxid),
			LeaseID: st.EphemeralOwner, Created: st.Czxid}
		for _, m := range q {
			queued = append(queued, m.name)
		}
		return l, w, queued, nil
	}
}
