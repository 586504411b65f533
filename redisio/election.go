package redisio

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// Election is redisio's election.Service; see NewElection.
type Election struct{ *service }

var (
	_ election.Service      = (*Election)(nil)
	_ election.TermResigner = (*Election)(nil)
)

// NewElection returns a candidate (and observer) in the election named
// name on cli. Candidates lead in the order they campaigned; a term's
// token is its Created, so tokens rise from term to term. Options and bad
// input as NewLock.
func NewElection(cli *redis.Client, name string, opts ...Option) (election.Service, error) {
	v, err := newService(cli, "election", name, kindElection, opts)
	if err != nil {
		return nil, err
	}
	return &Election{v}, nil
}

// Campaign blocks until this candidate leads with value.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if err := e.checkValue("campaign", value); err != nil {
		return err
	}
	_, err := e.acquire(ctx, false, value, 'w')
	return err
}

// Proclaim changes the leader's value; election.ErrNotLeader unless leading.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := e.checkValue("proclaim", value); err != nil {
		return err
	}
	h, err := loopCall(e.s, ctx, func() (hold, error) {
		if e.ended || e.closing {
			return hold{}, e.Err()
		}
		if e.held == nil || e.held.releasing {
			return hold{}, e.errf("%w", election.ErrNotLeader)
		}
		return *e.held, nil
	})
	if err != nil {
		return err
	}
	n, err := proclaimScript.Run(ctx, e.s.cli, []string{e.queue, e.granted, e.s.key, h.key}, value, e.wake).Int64()
	if err != nil {
		return e.errf("proclaim: %w", err)
	}
	if n == 0 {
		return e.errf("%w", election.ErrNotLeader)
	}
	_, err = loopCall(e.s, context.Background(), func() (struct{}, error) {
		if e.held != nil && e.held.created == h.created {
			e.held.value = value
			hh := *e.held
			e.term.Store(&hh)
		}
		return struct{}{}, nil
	})
	return err
}

// Resign ends this candidate's term; election.ErrNotLeader if it has none.
func (e *Election) Resign(ctx context.Context) error { return e.release(ctx, 0, true, 0) }

// ResignTerm ends exactly term, matched by its Created.
func (e *Election) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.release(ctx, term.Created, false, 0)
}

// Term is this candidate's own current term.
func (e *Election) Term() (election.Leadership, bool) {
	h := e.term.Load()
	if h == nil {
		return election.Leadership{}, false
	}
	return e.leadership(*h), true
}

func (e *Election) leadership(h hold) election.Leadership {
	return election.Leadership{Key: h.key, Value: h.value, FencingToken: tokenOf(h), LeaseID: e.s.id, Created: h.created}
}

// Leader returns whoever leads now; election.ErrNoLeader if nobody does.
func (e *Election) Leader(ctx context.Context) (election.Leadership, error) {
	if err := e.Err(); err != nil {
		return election.Leadership{}, err
	}
	l, err := e.readLeader(ctx)
	if err != nil {
		return l, err
	}
	if l.Key == "" {
		return l, e.errf("%w", election.ErrNoLeader)
	}
	return l, nil
}

// Observe delivers the current leader first, then each change.
func (e *Election) Observe(ctx context.Context) <-chan election.Leadership {
	seq := e.leaderReads.Add(1)
	l, rerr := e.readLeader(ctx)
	ch, err := loopCall(e.s, ctx, func() (<-chan election.Leadership, error) {
		if e.ended {
			return nil, e.Err()
		}
		if rerr == nil {
			e.applyLeaderLoop(seq, l)
		}
		return e.obs.Subscribe(ctx, e.leader), nil
	})
	if err != nil {
		closed := make(chan election.Leadership)
		close(closed)
		return closed
	}
	return ch
}

// checkValue refuses a value over the service's limit before anything is
// sent.
func (e *Election) checkValue(what, value string) error {
	if len(value) > e.maxValue {
		return e.errf("%s: value of %d bytes, more than the %d accepted (WithMaxValueSize): %w",
			what, len(value), e.maxValue, primitives.ErrInvalidArgument)
	}
	return nil
}
