package etcdio

import (
	"cmp"
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

// electionService is election.Service on a session. Candidates queue by
// CreateRevision under prefix, as in etcd's concurrency.Election: the first
// key created leads, and its CreateRevision is the term's token. A
// candidate waits as a lock's owner does (see queue.go), behind the key
// just ahead of its own alone, so a failover wakes the one candidate next
// in line however many wait. Who leads, for LeaderChanged and Observe, comes
// from the session's mirror of the whole prefix, which the service follows
// only while someone subscribes to its events or observes it (see
// listenersChanged).
type electionService struct{ *service }

var electionSpec = &spec{kind: "election", errNotHeld: election.ErrNotLeader, ownQueues: []string{""}, election: true}

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
	_, err := e.acquire(ctx, queue{keys: e.prefix, blockers: e.prefix, value: value}, false)
	return err
}

// electionChanged reports a new leader and answers Observe calls that
// waited for the mirror of the prefix. Loop only.
func (svc *service) electionChanged(m *mirror) {
	if !m.ready {
		return
	}
	now := leadership(m.leader(svc.ours))
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
}

// listenersChanged follows who leads (the session's mirror of the prefix)
// while anyone subscribes to the service's events or observes it, and stops
// when nobody does. A service that starts following again reports a
// leader only if it differs from the last one it reported. Loop only.
func (svc *service) listenersChanged() {
	_, joined := svc.s.services[svc]
	switch listening := joined && !svc.Ended() && svc.listeners.Listening(); {
	case listening && svc.leaderMirror == nil:
		svc.leaderMirror = svc.s.openMirror(mirrorID{prefix: svc.prefix, puts: true}, svc)
		svc.electionChanged(svc.leaderMirror) // a mirror another service keeps is ready
	case !listening && svc.leaderMirror != nil:
		svc.s.closeMirror(svc.leaderMirror, svc)
		svc.leaderMirror = nil
		// Every observation has ended, those still parked too.
		for _, c := range svc.pending {
			c.reply.Answer(nil, context.Canceled)
		}
		svc.pending = nil
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
	// A repeat of a put that landed puts the same value again.
	resp, _, err := e.s.txn(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(c.Key), "=", c.Created)},
		[]clientv3.Op{clientv3.OpPut(c.Key, value, clientv3.WithLease(e.s.lease))})
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
	return e.release(ctx, driver.CreatedAt(term.Created))
}

func (e electionService) Leader(ctx context.Context) (election.Leadership, error) {
	if err := e.Usable(ctx); err != nil {
		return election.Leadership{}, err
	}
	resp, err := e.s.get(ctx, e.prefix, clientv3.WithFirstCreate()...)
	if err == nil && len(resp.Kvs) > 0 && !e.ours(resp.Kvs[0]) {
		// A nested name's key is first: look past every such key.
		resp, err = e.s.get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
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
	if ctx == nil {
		return driver.Closed[election.Leadership]()
	}
	e.listeners.Join(ctx)
	// The first state Observe gives is no older than the call: the loop
	// answers once its mirror has reached the revision etcd is at now.
	var now int64
	resp, err := e.s.get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err == nil {
		now = resp.Header.Revision
	}
	ch, err := call(ctx, e.s, func(r actor.Reply[<-chan election.Leadership]) { e.observe(ctx, now, r) })
	if err != nil {
		return driver.Closed[election.Leadership]()
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
	if svc.leaderMirror == nil {
		svc.listenersChanged()
	}
	switch m := svc.leaderMirror; {
	case svc.Ended():
		r.Answer(nil, svc.Err())
	case m == nil:
		r.Answer(nil, cmp.Or(ctxtime.Ended(ctx), context.Canceled)) // the observation ended already
	case m.ready && m.rev >= rev:
		r.Answer(svc.observers.Subscribe(ctx, svc.leader), nil)
	default:
		svc.pending = append(svc.pending, observeCall{rev, r})
		m.requestProgress()
	}
}
