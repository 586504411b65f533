package etcdio

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// electionService is election.Service on a session. Candidates queue by
// CreateRevision under prefix, as in etcd's concurrency.Election: the first
// key created leads, and its CreateRevision is the term's token. A term is
// the service's hold (see holds); a candidacy still waiting is cand.
type electionService struct {
	base
	observers *actor.Fanout[election.Leadership]

	// Owned by the loop.
	cand    *candidate
	leader  election.Leadership // the leader last reported
	pending []actor.Reply[<-chan election.Leadership]
}

// candidate is a key waiting to lead; Campaign waits on reply.
type candidate struct {
	key       string
	createRev int64
	value     string
	reply     actor.Reply[struct{}]
}

// NewElection returns a candidate and observer in the election on prefix.
// Candidates queue under prefix+"/" in the order etcd's
// concurrency.Election uses, so the two agree on who leads.
func NewElection(cli *clientv3.Client, prefix string, opts ...Option) (election.Service, error) {
	e := &electionService{observers: actor.NewFanout(func(election.Leadership) bool { return true })}
	// Everyone's keys matter to an election: who leads is the first of them.
	all := func(_ *Session, prefix string) ([]string, bool) { return []string{prefix}, true }
	if err := e.start("election", cli, prefix, opts, e, election.ErrNotLeader, all); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *electionService) Campaign(ctx context.Context, value string) error {
	if err := e.enter(ctx, false, nil); err != nil {
		return err
	}
	if err := e.campaign(ctx, value); err != nil {
		e.leave()
		return err
	}
	return nil
}

func (e *electionService) campaign(ctx context.Context, value string) error {
	key := e.nextKey(e.prefix)
	resp, err := e.s.cli.Txn(ctx).Then(
		clientv3.OpGet(e.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpPut(key, value, clientv3.WithLease(e.s.lease)),
	).Commit()
	if err != nil {
		e.s.deleteKey(key) // the put may have happened
		return e.callErr(ctx, fmt.Errorf("%s: campaign: %w", e.name, err))
	}
	rev := resp.Header.Revision
	ahead := resp.Responses[0].GetResponseRange().Count > 0
	_, err = call(ctx, e.s, func(r actor.Reply[struct{}]) { e.queued(key, rev, value, ahead, r) })
	if err != nil {
		// Whatever went wrong, a key left behind would block every other
		// candidate until the lease ends.
		e.s.deleteKey(key)
		e.s.post(func() {
			if c := e.cand; c != nil && c.createRev == rev {
				e.cand = nil
			}
		})
		return err
	}
	return nil
}

// queued registers a candidate key written at rev. Loop only.
func (e *electionService) queued(key string, rev int64, value string, ahead bool, r actor.Reply[struct{}]) {
	switch {
	case e.ended:
		r.Answer(struct{}{}, e.Err())
	case e.gone(key, rev):
		r.Answer(struct{}{}, fmt.Errorf("%s: key %s deleted before it led: %w", e.name, key, primitives.ErrLost))
	default:
		e.seen = max(e.seen, rev)
		e.cand = &candidate{key: key, createRev: rev, value: value, reply: r}
		if !ahead {
			e.lead() // the transaction saw no earlier candidate
		} else {
			e.mirrorChanged(e.mirrors[0])
		}
	}
}

// lead makes the waiting candidate the leader, if Campaign still wants it.
// Loop only.
func (e *electionService) lead() {
	c := e.cand
	e.cand = nil
	// Term reads the term without the loop: it must be set before Campaign
	// can return.
	e.setHold(&hold{key: c.key, createRev: c.createRev, token: c.createRev, value: c.value, ready: true})
	if !c.reply.Answer(struct{}{}, nil) {
		e.setHold(nil) // Campaign gave up: it deletes the key and leaves
		return
	}
	e.events.Publish(primitives.Acquired{Key: c.key, Token: fencing.Token(c.createRev), Created: c.createRev})
}

// mirrorChanged reports a new leader, ends a term whose key vanished, and
// makes the waiting candidate lead when its turn has come. Loop only.
func (e *electionService) mirrorChanged(m *mirror) {
	if !m.ready {
		return
	}
	var now election.Leadership
	if kv := m.first(e.prefix); kv != nil {
		now = election.Leadership{Key: string(kv.Key), Value: string(kv.Value), FencingToken: fencing.Token(kv.CreateRevision), LeaseID: kv.Lease, Created: kv.CreateRevision}
	}
	if now != e.leader {
		e.leader = now
		e.events.Publish(primitives.LeaderChanged{Key: now.Key, Value: now.Value, Token: now.FencingToken})
		e.observers.Publish(now)
	}
	if m.rev >= e.seen {
		for _, r := range e.pending {
			r.Answer(e.observers.Subscribe(r.Context(), now), nil)
		}
		e.pending = nil
	}

	e.checkHold()
	c := e.cand
	switch {
	case c == nil || m.rev < c.createRev:
	case !m.has(c.key):
		e.cand = nil
		c.reply.Answer(struct{}{}, fmt.Errorf("%s: candidate key %s deleted by another client: %w", e.name, c.key, primitives.ErrLost))
	case !m.anyBefore(e.prefix, c.createRev):
		e.lead()
	}
}

func (e *electionService) Proclaim(ctx context.Context, value string) error {
	c, err := e.withHold(ctx, nil, func(*hold) {})
	if err != nil {
		return err
	}
	resp, err := e.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.createRev)).
		Then(clientv3.OpPut(c.key, value, clientv3.WithLease(e.s.lease))).Commit()
	if err != nil {
		return e.callErr(ctx, fmt.Errorf("%s: proclaim: %w", e.name, err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s: proclaim: leader key %s is gone: %w", e.name, c.key, election.ErrNotLeader)
	}
	_, err = call(context.WithoutCancel(ctx), e.s, func(r actor.Reply[struct{}]) {
		e.seen = max(e.seen, resp.Header.Revision)
		if cur := e.hold; cur != nil && cur.createRev == c.createRev {
			cur.value = value
			e.setHold(cur)
		}
		r.Answer(struct{}{}, nil)
	})
	return err
}

func (e *electionService) Resign(ctx context.Context) error { return e.release(ctx, nil) }

// ResignTerm resigns exactly term, as lock's Release releases exactly one
// grant: ErrNotLeader if this candidate no longer leads in that term, even if
// it has won a later one. election.Lead uses it.
func (e *electionService) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.release(ctx, func(g hold) bool { return g.key == term.Key && fencing.Token(g.token) == term.FencingToken })
}

func (e *electionService) Leader(ctx context.Context) (election.Leadership, error) {
	if err := e.usable(ctx); err != nil {
		return election.Leadership{}, err
	}
	resp, err := e.s.cli.Get(ctx, e.prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return election.Leadership{}, e.callErr(ctx, fmt.Errorf("%s: leader: %w", e.name, err))
	}
	if len(resp.Kvs) == 0 {
		return election.Leadership{}, fmt.Errorf("%s: %w", e.name, election.ErrNoLeader)
	}
	kv := resp.Kvs[0]
	return election.Leadership{Key: string(kv.Key), Value: string(kv.Value), FencingToken: fencing.Token(kv.CreateRevision), LeaseID: kv.Lease, Created: kv.CreateRevision}, nil
}

func (e *electionService) Term() (election.Leadership, bool) {
	g, ok := e.current()
	if !ok {
		return election.Leadership{}, false
	}
	return election.Leadership{Key: g.key, Value: g.value, FencingToken: fencing.Token(g.token), LeaseID: int64(e.s.lease), Created: g.createRev}, true
}

func (e *electionService) Observe(ctx context.Context) <-chan election.Leadership {
	ch, err := call(ctx, e.s, func(r actor.Reply[<-chan election.Leadership]) {
		switch {
		case e.ended:
			r.Answer(nil, e.Err())
		case e.mirrors[0].ready && e.mirrors[0].rev >= e.seen:
			r.Answer(e.observers.Subscribe(ctx, e.leader), nil)
		default:
			e.pending = append(e.pending, r) // answered once the mirror catches up
		}
	})
	if err != nil {
		closed := make(chan election.Leadership)
		close(closed)
		return closed
	}
	return ch
}

func (e *electionService) sessionEnded(err error) {
	e.endHoldFor(err)
	e.stopCandidate(err)
	e.observers.Close()
	e.finish(err)
}

// stopCandidate fails a waiting Campaign with err and returns its key. Loop
// only.
func (e *electionService) stopCandidate(err error) []keyRev {
	c := e.cand
	if c == nil {
		return nil
	}
	e.cand = nil
	c.reply.Answer(struct{}{}, err)
	return []keyRev{{c.key, c.createRev}}
}

func (e *electionService) Close() error {
	return e.base.close(func() []keyRev {
		err := fmt.Errorf("%s: %w", e.name, primitives.ErrClosed)
		keys := append(e.endHoldFor(err), e.stopCandidate(err)...)
		e.observers.Close()
		return keys
	})
}
