package etcdio

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

// electionService is election.Service on a session. Candidates queue by
// CreateRevision under prefix, as in etcd's concurrency.Election: the first
// key created leads, and its CreateRevision is the term's token. A term is
// the service's grant; a candidacy still waiting is its waiter, which the
// loop makes the grant when the session's mirror of the prefix shows no
// earlier key.
type electionService struct{ *service }

var electionSpec = &spec{kind: "election", errNotHeld: election.ErrNotLeader, mirrorAll: true}

// NewElection returns a candidate and observer in the election on prefix.
// Candidates queue under prefix+"/" in the order etcd's
// concurrency.Election uses, so the two agree on who leads.
func NewElection(cli *clientv3.Client, prefix string, opts ...Option) (election.Service, error) {
	svc, err := newService(electionSpec, cli, prefix, opts)
	if err != nil {
		return nil, err
	}
	return electionService{svc}, nil
}

// checkValue refuses a value larger than the service accepts, before
// anything is sent.
func (e electionService) checkValue(what, value string) error {
	if len(value) > e.maxValue {
		return fmt.Errorf("%s: %s: value of %d bytes, more than the %d accepted (WithMaxValueSize): %w",
			e.name, what, len(value), e.maxValue, ErrInvalidArgument)
	}
	return nil
}

func (e electionService) Campaign(ctx context.Context, value string) error {
	if err := e.checkValue("campaign", value); err != nil {
		return err
	}
	if err := e.Enter(ctx, false); err != nil {
		return err
	}
	if err := e.campaign(ctx, value); err != nil {
		e.Leave()
		return err
	}
	return nil
}

func (e electionService) campaign(ctx context.Context, value string) error {
	count := clientv3.OpGet(e.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	w, resp, err := e.create(ctx, e.prefix, value, nil, count)
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	ahead := resp.Responses[0].GetResponseRange().Count > 0
	_, err = e.park(ctx, w, func(r actor.Reply[driver.Hold]) { e.campaigned(w, ahead, r) })
	return err
}

// campaigned parks Campaign's caller until its key leads. Loop only.
func (svc *service) campaigned(w *waiter, ahead bool, r actor.Reply[driver.Hold]) {
	switch {
	case svc.Ended():
		r.Answer(driver.Hold{}, svc.Err())
		return
	case svc.gone(w.key, w.created):
		r.Answer(driver.Hold{}, fmt.Errorf("%s: key %s deleted before it led: %w", svc.name, w.key, primitives.ErrLost))
		return
	}
	svc.seen = max(svc.seen, w.created)
	w.reply = r
	w.waited = ahead
	svc.waiter = w
	if !ahead {
		svc.grantWaiter(w, driver.Hold{Key: w.key, Created: w.created, Token: fencing.Token(w.created), Value: w.value, Waited: w.waited})
		return
	}
	svc.electionChanged(svc.mirrors[0])
}

// electionChanged reports a new leader, answers Observe calls that waited
// for the mirror, ends a term whose key vanished, and makes the waiting
// candidate lead when its turn has come. Loop only.
func (svc *service) electionChanged(m *mirror) {
	if !m.ready {
		return
	}
	first := m.leader(svc.ours)
	now := leadership(first)
	if now != svc.leader {
		svc.leader = now
		svc.metrics.LeaderChanged()
		svc.Publish(primitives.LeaderChanged{Key: now.Key, Value: now.Value, Token: now.FencingToken})
		svc.observers.Publish(now)
	}
	waiting := svc.pending[:0]
	for _, c := range svc.pending {
		if m.rev >= c.rev {
			c.reply.Answer(svc.observers.Subscribe(c.reply.Context(), now), nil)
		} else {
			waiting = append(waiting, c)
		}
	}
	svc.pending = waiting
	if len(waiting) > 0 {
		m.requestProgress() // a request made before the watch was in place is lost
	}
	svc.checkGrant()
	w := svc.waiter
	switch {
	case w == nil || m.rev < w.created:
	case !m.has(w.key):
		svc.stopWaiter(fmt.Errorf("%s: candidate key %s deleted by another client: %w", svc.name, w.key, primitives.ErrLost))
	case first != nil && first.CreateRevision == w.created:
		// w's key is there, and no key of the layout created before it.
		svc.grantWaiter(w, driver.Hold{Key: w.key, Created: w.created, Token: fencing.Token(w.created), Value: w.value, Waited: w.waited})
	}
}

func leadership(kv *mvccpb.KeyValue) election.Leadership {
	if kv == nil {
		return election.Leadership{}
	}
	return election.Leadership{Key: string(kv.Key), Value: string(kv.Value), FencingToken: fencing.Token(kv.CreateRevision),
		LeaseID: kv.Lease, Created: kv.CreateRevision}
}

func (e electionService) Proclaim(ctx context.Context, value string) error {
	if err := e.checkValue("proclaim", value); err != nil {
		return err
	}
	c, err := e.withGrant(ctx, nil, func() {})
	if err != nil {
		return err
	}
	resp, err := e.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.Key), "=", c.Created)).
		Then(clientv3.OpPut(c.Key, value, clientv3.WithLease(e.s.lease))).Commit()
	if err != nil {
		return e.callErr(ctx, fmt.Errorf("%s: proclaim: %w", e.name, err))
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s: proclaim: leader key %s is gone: %w", e.name, c.Key, election.ErrNotLeader)
	}
	_, err = call(context.WithoutCancel(ctx), e.s, func(r actor.Reply[struct{}]) {
		e.proclaimed(c.Created, value, resp.Header.Revision)
		r.Answer(struct{}{}, nil)
	})
	return err
}

// proclaimed records a term's new value, written at rev. Loop only.
func (svc *service) proclaimed(created int64, value string, rev int64) {
	svc.seen = max(svc.seen, rev)
	if cur := svc.Held(); cur != nil && cur.Created == created {
		svc.Update(func(h *driver.Hold) { h.Value = value })
	}
}

func (e electionService) Resign(ctx context.Context) error { return e.release(ctx, nil) }

// ResignTerm resigns exactly term, as lock's Release releases exactly one
// grant: ErrNotLeader if this candidate no longer leads in that term, even if
// it has won a later one. election.Lead uses it.
func (e electionService) ResignTerm(ctx context.Context, term election.Leadership) error {
	return e.release(ctx, driver.Exactly(term.Created, term.Key, term.FencingToken))
}

func (e electionService) Leader(ctx context.Context) (election.Leadership, error) {
	if err := e.Usable(ctx); err != nil {
		return election.Leadership{}, err
	}
	resp, err := e.s.cli.Get(ctx, e.prefix, clientv3.WithFirstCreate()...)
	if err == nil && len(resp.Kvs) > 0 && !e.ours(resp.Kvs[0]) {
		// A nested name's key is first: look past every such key.
		resp, err = e.s.cli.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	}
	if err != nil {
		return election.Leadership{}, e.callErr(ctx, fmt.Errorf("%s: leader: %w", e.name, err))
	}
	for _, kv := range resp.Kvs {
		if e.ours(kv) {
			return leadership(kv), nil
		}
	}
	return election.Leadership{}, fmt.Errorf("%s: %w", e.name, election.ErrNoLeader)
}

func (e electionService) Term() (election.Leadership, bool) {
	g, ok := e.Current()
	if !ok {
		return election.Leadership{}, false
	}
	return election.Leadership{Key: g.Key, Value: g.Value, FencingToken: g.Token, LeaseID: g.LeaseID, Created: g.Created}, true
}

func (e electionService) Observe(ctx context.Context) <-chan election.Leadership {
	// The first state Observe gives is no older than the call: the loop
	// answers once its mirror has reached the revision etcd is at now.
	var now int64
	if resp, err := e.s.cli.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		now = resp.Header.Revision
	}
	ch, err := call(ctx, e.s, func(r actor.Reply[<-chan election.Leadership]) { e.observe(ctx, now, r) })
	if err != nil {
		closed := make(chan election.Leadership)
		close(closed)
		return closed
	}
	return ch
}

// observeCall is an Observe parked until the mirror reaches rev.
type observeCall struct {
	rev   int64
	reply actor.Reply[<-chan election.Leadership]
}

// observe subscribes an observer once the mirror has caught up with this
// service's own writes and with now, the revision etcd was at when Observe
// was called; until then the call is parked (and the mirror's helper asked
// for a progress notification, since nothing under the prefix may change),
// and answered with the service's end if that comes first. Loop only.
func (svc *service) observe(ctx context.Context, now int64, r actor.Reply[<-chan election.Leadership]) {
	rev := max(now, svc.seen)
	switch m := svc.mirrors[0]; {
	case svc.Ended():
		r.Answer(nil, svc.Err())
	case m.ready && m.rev >= rev:
		r.Answer(svc.observers.Subscribe(ctx, svc.leader), nil)
	default:
		svc.pending = append(svc.pending, observeCall{rev, r})
		m.requestProgress()
	}
}
