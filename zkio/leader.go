package zkio

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// leaderState is an election service's view of who leads, kept by the loop
// from the reads of one helper (followLeader).
type leaderState struct {
	asked atomic.Uint64 // reads asked for; a read started after the ask carries at least its number
	poke  chan struct{}

	// Loop only.
	view      election.Leadership
	seen      uint64 // number of the latest read applied
	observers *actor.Fanout[election.Leadership]
	waiting   []observeReq
}

type observeReq struct {
	after uint64
	r     actor.Reply[<-chan election.Leadership]
}

func (ls *leaderState) init() {
	ls.poke = make(chan struct{}, 1)
	ls.observers = actor.NewFanout(func(election.Leadership) bool { return true })
}

// ask requests a fresh read and returns its number. Loop only.
func (ls *leaderState) ask() uint64 {
	n := ls.asked.Add(1)
	select {
	case ls.poke <- struct{}{}:
	default:
	}
	return n
}

// end closes every observation. Loop only.
func (ls *leaderState) end() {
	if ls.observers == nil {
		return
	}
	for _, w := range ls.waiting {
		closed := make(chan election.Leadership)
		close(closed)
		w.r.Answer(closed, nil)
	}
	ls.waiting = nil
	ls.observers.Close()
}

// readLeader reads who leads the election at path now: the first znode of
// the "latch" queue, its data and its czxid. sync first makes the read no
// older than any change completed before it started, whichever server
// answers. A zero Leadership means nobody leads.
func readLeader(conn *zk.Conn, path string, watch bool) (election.Leadership, [2]<-chan zk.Event, error) {
	var none [2]<-chan zk.Event
	if _, err := conn.Sync(path); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return election.Leadership{}, none, err
	}
	for {
		var children []string
		var ch <-chan zk.Event
		var err error
		if watch {
			children, _, ch, err = conn.ChildrenW(path)
		} else {
			children, _, err = conn.Children(path)
		}
		if errors.Is(err, zk.ErrNoNode) {
			if !watch {
				return election.Leadership{}, none, nil
			}
			var exists bool
			exists, _, ch, err = conn.ExistsW(path)
			if err == nil && exists {
				continue // created meanwhile
			}
			return election.Leadership{}, [2]<-chan zk.Event{ch}, err
		}
		if err != nil {
			return election.Leadership{}, none, err
		}
		q := queueOf(children, latchMarker)
		if len(q) == 0 {
			return election.Leadership{}, [2]<-chan zk.Event{ch}, nil
		}
		node := path + "/" + q[0].name
		var data []byte
		var st *zk.Stat
		var dch <-chan zk.Event
		if watch {
			data, st, dch, err = conn.GetW(node)
		} else {
			data, st, err = conn.Get(node)
		}
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return election.Leadership{}, none, err
		}
		l := election.Leadership{Key: node, Value: string(data), FencingToken: fencing.Token(st.Czxid),
			LeaseID: st.EphemeralOwner, Created: st.Czxid}
		return l, [2]<-chan zk.Event{ch, dch}, nil
	}
}

// followLeader reads who leads whenever the election changes or the loop
// asks, and hands each read to the loop. Only a read after a watch fired
// (or failed) sets new watches: the client keeps every watch until it
// fires, so a read the loop asks for leaves the armed ones to report the
// next change. Helper.
func (svc *service) followLeader() {
	ls := &svc.leader
	var ch [2]<-chan zk.Event
	armed := false
	for {
		n := ls.asked.Load()
		l, nch, err := readLeader(svc.s.conn, svc.path, !armed)
		if err != nil {
			if !retryable(err) && !errors.Is(err, zk.ErrClosing) {
				svc.s.log.Debug("zkio: read leader: " + err.Error())
			}
			armed = false
			if !svc.s.sleep(retryPause) {
				return
			}
			select {
			case <-svc.Done():
				return
			default:
			}
			continue
		}
		if !armed {
			ch, armed = nch, true
		}
		svc.s.post(func() { svc.leaderRead(n, l) })
		select {
		case <-ch[0]:
			armed = false
			svc.metrics.Woken(svc.spec.kind, 1)
		case <-ch[1]:
			armed = false
			svc.metrics.Woken(svc.spec.kind, 1)
		case <-ls.poke:
		case <-svc.Done():
			return
		case <-svc.s.quit:
			return
		}
	}
}

// leaderRead applies read number n. Loop only.
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
// called (from a read started after it), then every change.
func (svc *service) observe(ctx context.Context) <-chan election.Leadership {
	ch, err := call(ctx, svc, func(r actor.Reply[<-chan election.Leadership]) {
		if svc.stopped() != nil {
			closed := make(chan election.Leadership)
			close(closed)
			r.Answer(closed, nil)
			return
		}
		svc.leader.waiting = append(svc.leader.waiting, observeReq{after: svc.leader.ask(), r: r})
	})
	if err != nil {
		closed := make(chan election.Leadership)
		close(closed)
		return closed
	}
	return ch
}

// currentLeader reads who leads now, on the caller's goroutine.
func (svc *service) currentLeader(ctx context.Context) (election.Leadership, error) {
	for {
		if err := svc.live(ctx); err != nil {
			return election.Leadership{}, err
		}
		l, _, err := readLeader(svc.s.conn, svc.path, false)
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
