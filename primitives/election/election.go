// Package election defines leader election with fencing tokens, independent
// of any backend. Each backend's NewElection provides one.
//
// A leader's fencing token is strictly greater than every earlier leader's,
// and stays the same for its whole term (Proclaim changes the value, not the
// term). A leader attaches its token to everything it does as leader; a
// resource that rejects tokens below the highest it has seen (package
// fencing/guard) then ignores a deposed leader that has not noticed yet.
//
// Lead runs one term. A Service whose session is lost is done for good; a
// long-running candidate that should stay in the election through lost
// terms and lost sessions runs Supervise, which campaigns again after a
// backoff, on a new Service when the old one is done.
//
// Healthz is a leader's liveness probe (an http.Handler): it fails once a
// term of this process was lost, or suspended on a Service built to cancel
// there, and the fn of that term has not returned within a timeout, so
// that an orchestrator restarts a leader stuck in work it should have
// stopped.
package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/internal/hold"
)

var (
	// ErrNotLeader is returned by Proclaim and Resign when this candidate
	// does not lead.
	ErrNotLeader = errors.New("election: not leader")
	// ErrNoLeader is returned by Leader when nobody leads.
	ErrNoLeader = errors.New("election: no leader")
)

// Service is one candidate in an election, and an observer of it.
type Service interface {
	// Campaign blocks until this candidate leads, with value as the
	// leader's value. If ctx ends or anything fails first, the candidacy is
	// withdrawn and nothing is left behind; if ctx ended, the error is
	// ctx.Err(). A second Campaign of the same
	// Service waits until the first term ends.
	Campaign(ctx context.Context, value string) error
	// Proclaim changes the leader's value without changing the term or its
	// token; ErrNotLeader if this candidate does not lead.
	Proclaim(ctx context.Context, value string) error
	// Resign ends this candidate's term, so that the next candidate leads
	// at once; ErrNotLeader if it does not lead. A Resign that fails keeps
	// the term and may be retried.
	Resign(ctx context.Context) error
	// Leader returns whoever leads now, this candidate or another;
	// ErrNoLeader if nobody does.
	Leader(ctx context.Context) (Leadership, error)
	// Term returns this candidate's own current term, never a later
	// leader's, and false if it does not lead.
	Term() (Leadership, bool)
	// Observe delivers the current leader first, then each change. A zero
	// Leadership (Key == "") means no leader. Leaders' tokens never go back;
	// a slow reader may miss intermediate states but always gets the latest,
	// and never gets one state twice in a row. The channel is closed when
	// ctx ends or the Service is done.
	Observe(ctx context.Context) <-chan Leadership
	// Subscribe delivers Acquired when this candidate wins, Released when it
	// resigns, Lost when its term ends involuntarily, and LeaderChanged for
	// every leader it sees. A candidate need not follow who leads while
	// nobody subscribes to it or observes it (on etcd, ZooKeeper and Redis
	// it does not, so that a failover among many candidates wakes the next
	// one alone): the first LeaderChanged after Subscribe may name the
	// leader of that moment, if the candidate had not reported it yet.
	Subscribe(ctx context.Context) <-chan primitives.Event
	// Done is closed when the Service can no longer be used.
	Done() <-chan struct{}
	// Err is nil while the Service is usable; then it wraps
	// primitives.ErrLost or primitives.ErrClosed.
	Err() error
	// Close withdraws the candidacy or resigns, promptly, in the backend too.
	// A later Close returns an error wrapping primitives.ErrClosed once the
	// first has returned.
	Close() error
}

// Leadership is one leader's term.
type Leadership struct {
	// Key is the leader's key; "" means nobody leads.
	Key string
	// Value is what the leader proclaimed.
	Value string
	// FencingToken is the CreateRevision of Key: strictly greater from
	// term to term, the same throughout a term.
	FencingToken fencing.Token
	// LeaseID is the lease or session Key is bound to.
	LeaseID int64
	// Created is the backend's creation sequence of Key (each backend's
	// doc says what it is). It names the term; ResignTerm matches by it;
	// zero never matches.
	Created int64
}

// Token returns the term's fencing token.
func (l Leadership) Token() fencing.Token { return l.FencingToken }

const resignTimeout = 10 * time.Second

// TermResigner is implemented by a Service that can resign one given term:
// ErrNotLeader if it no longer leads in that term, even if it leads in a
// later one. Lead uses it when the Service has it, so that its final Resign
// can never end a term that another goroutine won after Lead's was lost.
type TermResigner interface {
	ResignTerm(ctx context.Context, term Leadership) error
}

// Lead campaigns, runs fn while leading with a context cancelled as soon as
// the term is lost, and resigns after fn returns. fn gets this candidate's
// own term. It returns fn's error; if the term was lost it returns
// errors.Join(fn's error, an error wrapping primitives.ErrLost, or
// primitives.ErrClosed if s was closed meanwhile). A failed
// Campaign is returned as is and fn is not called; a term won just as ctx
// ended is resigned and Lead returns ctx's error without calling fn. fn's
// context also ends when another call of s resigns the term (the cause
// wraps primitives.ErrReleased, and Lead then returns fn's error alone);
// the other rules are lock.Do's.
func Lead(ctx context.Context, s Service, value string, fn func(ctx context.Context, l Leadership) error) error {
	if err := hold.Check(ctx, "election.Lead", s, fn == nil); err != nil {
		return err
	}
	campaign := func(ctx context.Context) (Leadership, error) {
		if err := s.Campaign(ctx, value); err != nil {
			return Leadership{}, err
		}
		term, ok := s.Term()
		if !ok {
			return Leadership{}, fmt.Errorf("election: term ended before it could be led: %w", primitives.ErrLost)
		}
		return term, nil
	}
	resign := func(ctx context.Context, term Leadership) error {
		if tr, ok := s.(TermResigner); ok {
			return tr.ResignTerm(ctx, term)
		}
		return s.Resign(ctx)
	}
	created := func(l Leadership) int64 { return l.Created }
	key := func(l Leadership) string { return l.Key }
	return hold.Run(ctx, s, hold.Spec[Leadership]{Acquire: campaign, Created: created, Key: key, Release: resign,
		NotHeld: ErrNotLeader, ReleaseTimeout: resignTimeout}, fn)
}
