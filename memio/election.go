package memio

import (
	"context"
	"fmt"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// NewElection returns a candidate of the election on name in st. The leader
// is the candidate that campaigned first; its token is its key's creation
// revision (Created).
func NewElection(st *Store, name string, opts ...Option) (election.Service, error) {
	svc, _, err := newService(st, kindElection, name, opts)
	if err != nil {
		return nil, err
	}
	return electionService{svc}, nil
}

type electionService struct{ *service }

func (e electionService) checkValue(what, value string) error {
	if len(value) > e.maxValue {
		return fmt.Errorf("%s: %s: value of %d bytes, more than %d: %w", e.Spec().Name, what, len(value), e.maxValue, ErrInvalidArgument)
	}
	return nil
}

func (e electionService) Campaign(ctx context.Context, value string) error {
	if err := e.checkValue("campaign", value); err != nil {
		return err
	}
	_, err := e.acquire(ctx, rwlock.Write, value, false)
	return err
}

func (e electionService) Proclaim(ctx context.Context, value string) error {
	if err := e.checkValue("proclaim", value); err != nil {
		return err
	}
	if err := e.s.gate(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // as on the real backends: an ended call changes nothing
	}
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if _, err := e.On(nil); err != nil {
		return err
	}
	k := e.heldKey()
	if k == nil {
		return fmt.Errorf("%s: proclaim: leader key is gone: %w", e.Spec().Name, election.ErrNotLeader)
	}
	k.value = value
	e.st.write()
	e.Update(func(h *driver.Hold) { h.Value = value })
	e.st.announce(e.q)
	return nil
}

func (e electionService) Resign(ctx context.Context) error { return e.release(ctx, driver.Any) }

// ResignTerm resigns exactly term: ErrNotLeader if this candidate no longer
// leads in that term, even if it has won a later one.
func (e electionService) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.release(ctx, driver.CreatedAt(term.Created))
}

func (e electionService) Leader(ctx context.Context) (election.Leadership, error) {
	if err := e.s.gate(ctx); err != nil {
		return election.Leadership{}, err
	}
	if err := ctx.Err(); err != nil {
		return election.Leadership{}, err
	}
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	if err := e.Err(); err != nil {
		return election.Leadership{}, err
	}
	if e.q.leader.Key == "" {
		return election.Leadership{}, fmt.Errorf("%s: %w", e.Spec().Name, election.ErrNoLeader)
	}
	return e.q.leader, nil
}

func (e electionService) Term() (election.Leadership, bool) {
	h, ok := e.Current()
	if !ok {
		return election.Leadership{}, false
	}
	return election.Leadership{Key: h.Key, Value: h.Value, FencingToken: h.Token, LeaseID: h.LeaseID, Created: h.Created}, true
}

func (e electionService) Observe(ctx context.Context) <-chan election.Leadership {
	e.st.mu.Lock()
	defer e.st.mu.Unlock()
	if e.Ended() {
		return driver.Closed[election.Leadership]()
	}
	return e.observers.Subscribe(ctx, e.q.leader)
}

var _ primitives.SuspendCanceler = electionService{}
