package etcdio

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// electionService is election.Service on a session. Candidates queue by
// CreateRevision under prefix, as in etcd's concurrency.Election: the first
// key created leads, and its CreateRevision is the term's token.
type electionService struct {
	base
	sem       chan struct{} // full while this candidate campaigns or leads
	observers *actor.Fanout[election.Leadership]

	termMu sync.Mutex
	term   election.Leadership // copy of the loop's, for Term; zero when not leading

	// Owned by the loop.
	cand    *candidate
	leader  election.Leadership // the leader last reported
	pending []actor.Reply[<-chan election.Leadership]
	// seen is the revision of this candidate's latest write: Observe waits
	// for the mirror to reach it, so a candidate observes its own changes.
	seen int64
}

type candidate struct {
	key       string
	createRev int64
	value     string
	leading   bool
	releasing int
	reply     actor.Reply[struct{}] // Campaign's, while waiting
}

// NewElection returns a candidate and observer in the election on prefix.
// Candidates queue under prefix+"/" in the order etcd's
// concurrency.Election uses, so the two agree on who leads.
func NewElection(cli *clientv3.Client, prefix string, opts ...Option) (election.Service, error) {
	e := &electionService{
		sem:       make(chan struct{}, 1),
		observers: actor.NewFanout(func(election.Leadership) bool { return true }),
	}
	// Everyone's keys matter to an election: who leads is the first of them.
	all := func(_ *Session, prefix string) ([]string, bool) { return []string{prefix}, true }
	if err := e.start("election", cli, prefix, opts, e, all); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *electionService) Campaign(ctx context.Context, value string) error {
	if err := e.usable(ctx); err != nil {
		return err
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-e.done:
		return e.Err()
	}
	if err := e.campaign(ctx, value); err != nil {
		<-e.sem
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
			if c := e.cand; c != nil && c.createRev == rev && !c.leading {
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
	// Term reads the term without the loop: it must be set before Campaign
	// can return.
	c.leading = true
	e.setTerm(c)
	if !c.reply.Answer(struct{}{}, nil) {
		e.cand = nil // Campaign gave up and deletes the key
		e.setTerm(nil)
		return
	}
	e.events.Publish(primitives.Acquired{Key: c.key, Token: fencing.Token(c.createRev)})
}

func (e *electionService) setTerm(c *candidate) {
	var t election.Leadership
	if c != nil {
		t = election.Leadership{Key: c.key, Value: c.value, FencingToken: fencing.Token(c.createRev), LeaseID: int64(e.s.lease)}
	}
	e.termMu.Lock()
	e.term = t
	e.termMu.Unlock()
}

// endTerm ends this candidate's term with ev. Loop only.
func (e *electionService) endTerm(ev primitives.Event) {
	e.cand = nil
	e.setTerm(nil)
	<-e.sem
	e.events.Publish(ev)
}

// mirrorChanged reports a new leader, ends a term whose key vanished, and
// makes the waiting candidate lead when its turn has come. Loop only.
func (e *electionService) mirrorChanged(m *mirror) {
	if !m.ready {
		return
	}
	var now election.Leadership
	if kv := m.first(e.prefix); kv != nil {
		now = election.Leadership{Key: string(kv.Key), Value: string(kv.Value), FencingToken: fencing.Token(kv.CreateRevision), LeaseID: kv.Lease}
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

	c := e.cand
	if c == nil || m.rev < c.createRev {
		return
	}
	switch {
	case c.leading && c.releasing == 0 && !m.has(c.key):
		e.endTerm(primitives.Lost{Key: c.key, Token: fencing.Token(c.createRev),
			Err: fmt.Errorf("%s: leader key %s deleted by another client: %w", e.name, c.key, primitives.ErrLost)})
		e.s.probeLease()
	case !c.leading && !m.has(c.key):
		e.cand = nil
		c.reply.Answer(struct{}{}, fmt.Errorf("%s: candidate key %s deleted by another client: %w", e.name, c.key, primitives.ErrLost))
	case !c.leading && !m.anyBefore(e.prefix, c.createRev):
		e.lead()
	}
}

// leaderCall runs f on the loop with this candidate's term (the one whose
// token is term, if term is not 0), or fails with ErrNotLeader.
func (e *electionService) leaderCall(ctx context.Context, term fencing.Token, f func(c *candidate)) (candidate, error) {
	return call(ctx, e.s, func(r actor.Reply[candidate]) {
		c := e.cand
		switch {
		case e.ended:
			r.Answer(candidate{}, e.Err())
		case c == nil || !c.leading || term != 0 && fencing.Token(c.createRev) != term:
			r.Answer(candidate{}, fmt.Errorf("%s: %w", e.name, election.ErrNotLeader))
		case r.Answer(*c, nil):
			f(c)
		}
	})
}

func (e *electionService) Proclaim(ctx context.Context, value string) error {
	c, err := e.leaderCall(ctx, 0, func(*candidate) {})
	if err != nil {
		return e.callErr(ctx, err)
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
		if cur := e.cand; cur != nil && cur.createRev == c.createRev {
			cur.value = value
			e.setTerm(cur)
		}
		r.Answer(struct{}{}, nil)
	})
	return err
}

func (e *electionService) Resign(ctx context.Context) error { return e.resign(ctx, 0) }

// ResignTerm resigns exactly term, as lock's Release releases exactly one
// grant: ErrNotLeader if this candidate no longer leads in that term, even if
// it has won a later one. election.Lead uses it.
func (e *electionService) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.resign(ctx, term.FencingToken)
}

func (e *electionService) resign(ctx context.Context, term fencing.Token) error {
	c, err := e.leaderCall(ctx, term, func(c *candidate) { c.releasing++ })
	if err != nil {
		return e.callErr(ctx, err)
	}
	resp, terr := e.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.key), "=", c.createRev)).
		Then(clientv3.OpDelete(c.key)).Commit()
	_, err = call(context.WithoutCancel(ctx), e.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, e.resigned(c, resp, terr))
	})
	return err
}

// resigned settles a Resign's delete. A failed request keeps the term, so
// Resign can be retried. Loop only.
func (e *electionService) resigned(c candidate, resp *clientv3.TxnResponse, terr error) error {
	cur := e.cand
	if cur == nil || cur.createRev != c.createRev {
		if e.ended {
			return e.Err()
		}
		return fmt.Errorf("%s: %w", e.name, election.ErrNotLeader)
	}
	cur.releasing--
	if terr == nil {
		e.seen = max(e.seen, resp.Header.Revision)
	}
	gone := e.gone(cur.key, cur.createRev)
	switch {
	case terr == nil && resp.Succeeded, terr != nil && gone:
		e.endTerm(primitives.Released{Key: cur.key, Token: fencing.Token(cur.createRev)})
		return nil
	case terr != nil:
		return fmt.Errorf("%s: resign: %w", e.name, terr)
	default:
		e.endTerm(primitives.Lost{Key: cur.key, Token: fencing.Token(cur.createRev),
			Err: fmt.Errorf("%s: leader key %s deleted by another client: %w", e.name, cur.key, primitives.ErrLost)})
		return fmt.Errorf("%s: leader key %s was already gone: %w", e.name, cur.key, election.ErrNotLeader)
	}
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
	return election.Leadership{Key: string(kv.Key), Value: string(kv.Value), FencingToken: fencing.Token(kv.CreateRevision), LeaseID: kv.Lease}, nil
}

func (e *electionService) Term() (election.Leadership, bool) {
	e.termMu.Lock()
	defer e.termMu.Unlock()
	return e.term, e.term.Key != ""
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
	if c := e.cand; c != nil {
		if c.leading {
			e.endTerm(endEvent(c.key, c.createRev, err))
		} else {
			e.cand = nil
			c.reply.Answer(struct{}{}, err)
		}
	}
	e.observers.Close()
	e.finish(err)
}

func (e *electionService) Close() error {
	return e.base.close(func() []keyRev {
		var keys []keyRev
		if c := e.cand; c != nil {
			keys = append(keys, keyRev{c.key, c.createRev})
			if c.leading {
				e.endTerm(primitives.Released{Key: c.key, Token: fencing.Token(c.createRev)})
			} else {
				e.cand = nil
				c.reply.Answer(struct{}{}, fmt.Errorf("%s: %w", e.name, primitives.ErrClosed))
			}
		}
		e.observers.Close()
		return keys
	})
}
