package zkio

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

var electionSpec = &spec{kind: "election", markers: []string{latchMarker}, notHeld: election.ErrNotLeader, taken: election.ErrNotLeader, election: true}

// NewElection returns a candidate in the election on the znode path, in the
// layout of Curator's LeaderLatch: a disco election and LeaderLatch
// participants on the same path agree on who leads. Sessions as NewLock.
func NewElection(servers []string, path string, opts ...Option) (election.Service, error) {
	svc, err := newService(servers, path, electionSpec, opts)
	if err != nil {
		return nil, err
	}
	return &zkElection{service: svc}, nil
}

type zkElection struct {
	*service
	// proclaims orders the Proclaims' writes, each with its record of the
	// value: a Proclaim that gave up leaves its write under way, and the
	// next one waits for it, so the term's value is the last write's.
	proclaims sync.Mutex
}

func leadership(h driver.Hold) election.Leadership {
	return election.Leadership{Key: h.Key, Value: h.Value, FencingToken: h.Token, LeaseID: h.LeaseID, Created: h.Created}
}

// Campaign and Proclaim refuse a value larger than the session takes
// (DefaultMaxDataSize, or WithMaxDataSize's) with an error wrapping
// ErrInvalidArgument, before they send anything.
func (e *zkElection) Campaign(ctx context.Context, value string) error {
	_, err := e.acquire(ctx, 0, value, false)
	return err
}

func (e *zkElection) Proclaim(ctx context.Context, value string) error {
	if err := e.s.checkValue("proclaim", value); err != nil {
		return err
	}
	h, err := call(ctx, e.service, func(r actor.Reply[driver.Hold]) {
		if err := e.stopped(); err != nil {
			r.Answer(driver.Hold{}, err)
			return
		}
		if cur := e.Held(); cur != nil && cur.Releasing() {
			r.Answer(driver.Hold{}, election.ErrNotLeader)
			return
		}
		r.Answer(e.On(driver.Any))
	})
	if err != nil {
		return err
	}
	// The client's requests take no context: the write runs on a session
	// helper, so that Proclaim returns when ctx ends even while ZooKeeper
	// does not answer. A write that lands after that still records the
	// value, as every observer sees it.
	done := make(chan error, 1)
	if !e.s.helper(func() { done <- e.set(h, value) }) {
		return cmp.Or(e.Err(), e.s.Err())
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("zkio: proclaim on %s: %w", h.Key, ctx.Err())
	}
}

// set writes value to the znode of term h and records it as the term's,
// after the writes of the Proclaims before. Helper.
func (e *zkElection) set(h driver.Hold, value string) error {
	e.proclaims.Lock()
	defer e.proclaims.Unlock()
	if _, err := e.s.conn.Set(h.Key, []byte(value), -1); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return election.ErrNotLeader
		}
		return fmt.Errorf("zkio: proclaim on %s: %w", h.Key, err)
	}
	_, err := call(context.Background(), e.service, func(r actor.Reply[struct{}]) {
		if cur := e.Held(); cur != nil && cur.Created == h.Created {
			e.Update(func(h *driver.Hold) { h.Value = value })
		}
		r.Answer(struct{}{}, nil)
	})
	return err
}

func (e *zkElection) Resign(ctx context.Context) error { return e.release(ctx, driver.Any) }

// ResignTerm ends exactly the term it names (by Created); ErrNotLeader if
// that term is over, even if this candidate leads in a later one.
func (e *zkElection) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.release(ctx, driver.CreatedAt(term.Created))
}

func (e *zkElection) Leader(ctx context.Context) (election.Leadership, error) {
	return e.currentLeader(ctx)
}

func (e *zkElection) Term() (election.Leadership, bool) {
	h, ok := e.Current()
	if !ok || e.Err() != nil {
		return election.Leadership{}, false
	}
	return leadership(h), true
}

func (e *zkElection) Observe(ctx context.Context) <-chan election.Leadership {
	return e.observe(ctx)
}
