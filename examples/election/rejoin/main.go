// Command rejoin tells the story of long-running leaders that stay in the
// election after losing their sessions, with election.Supervise.
//
// Three nodes A, B and C (each its own etcd client, as separate processes
// would be) run election.Supervise under one errgroup. Each term's fn writes
// to a resource behind a fencing guard with its token and then leads until
// the term ends. Twice the leader's lease is revoked from another client (a
// crash or a pause past the TTL, without waiting for it): the next node in
// line leads with a higher token, the guard rejects the former leader's
// late write, and the former leader does not drop out: its supervisor builds
// a new election service and campaigns again at the back of the line.
// Finally the errgroup's context is cancelled: every supervisor resigns,
// closes its service and returns context.Canceled, and nobody leads.
//
// Run it with
//
//	go run ./examples/election/rejoin
//
// It starts an embedded etcd member; set ETCD_ENDPOINTS to use a real
// cluster. It exits 0 only if the story ended as promised.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/election"
)

func main() { story.RunMain("rejoin example", story.HideAddress, run) }

// run tells the story against the etcd cluster at endpoints and returns an
// error unless it ended as promised.
func run(ctx context.Context, out io.Writer, endpoints []string) error {
	_, err := tell(ctx, out, endpoints)
	return err
}

// ttl is every node's lease time to live.
const ttl = 5 * time.Second

// term is one node's term as its fn saw it.
type term struct {
	Node string
	L    election.Leadership
}

// outcome is what the story observed, for the test to check.
type outcome struct {
	Terms []term // in the order they began
	// Rejected holds the guard's answer to each former leader's late write.
	Rejected []error
	// Built counts the election services each node's supervisor built.
	Built map[string]int
	// Wait is what the errgroup of supervisors returned.
	Wait error
	// KeysAtEnd counts the election's keys left after the supervisors
	// returned.
	KeysAtEnd int64
}

// node is one process that wants to lead, for as long as it runs.
type node struct {
	name string
	cli  *clientv3.Client
	mu   sync.Mutex
	// built counts the services its supervisor built.
	built int
}

func (n *node) services() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.built
}

func tell(ctx context.Context, out io.Writer, endpoints []string) (o outcome, err error) {
	say, step := story.Narrator(out)
	prefix := story.Prefix("election/rejoin")
	o.Built = make(map[string]int)

	clients := story.NewClients(endpoints)
	defer clients.Close()
	// world plays everything around the nodes: it looks at etcd's keys and
	// revokes leases.
	world, err := clients.New()
	if err != nil {
		return o, err
	}
	res := story.NewResource("")
	terms := make(chan term)

	// Each node's whole program: a supervisor that leads until the
	// errgroup's context ends.
	g, gctx := errgroup.WithContext(ctx)
	nodeCtx, stopNodes := context.WithCancel(gctx)
	defer stopNodes()
	waited := false
	defer func() {
		if !waited {
			stopNodes()
			_ = g.Wait()
		}
	}()
	nodes := map[string]*node{}
	for _, name := range []string{"A", "B", "C"} {
		cli, err := clients.New()
		if err != nil {
			return o, err
		}
		n := &node{name: name, cli: cli}
		nodes[name] = n
		newService := func(ctx context.Context) (election.Service, error) {
			s, err := etcdio.NewElection(n.cli, prefix, etcdio.WithTTL(ttl), etcdio.WithContext(ctx))
			if err == nil {
				n.mu.Lock()
				n.built++
				n.mu.Unlock()
			}
			return s, err
		}
		lead := func(ctx context.Context, l election.Leadership) error {
			if err := res.Write(ctx, l.Token(), "config by "+name); err != nil {
				// Already superseded: the loss is on its way.
				<-ctx.Done()
				return ctx.Err()
			}
			select {
			case terms <- term{name, l}:
			case <-ctx.Done():
			}
			<-ctx.Done() // lead until the term ends
			return ctx.Err()
		}
		g.Go(func() error {
			return election.Supervise(nodeCtx, newService, name, lead,
				election.WithBackoff(50*time.Millisecond, time.Second))
		})
		if name == "A" {
			// Let A lead first, so the line is A, B, C.
			if err := story.WaitForKeys(ctx, world, prefix, 1, "leader's keys"); err != nil {
				return o, err
			}
		} else if err := story.WaitForKeys(ctx, world, prefix, int64(len(nodes)), "candidates' keys"); err != nil {
			return o, err
		}
	}
	nextTerm := func() (term, error) {
		select {
		case t := <-terms:
			o.Terms = append(o.Terms, t)
			return t, nil
		case <-ctx.Done():
			return term{}, fmt.Errorf("waiting for a term: %w", ctx.Err())
		}
	}

	step("1. A, B and C each run election.Supervise, in that order")
	cur, err := nextTerm()
	if err != nil {
		return o, err
	}
	say("   %s leads with token %d and writes %q: accepted", cur.Node, cur.L.Token(), "config by "+cur.Node)
	say("   the others wait in line")

	for round := 2; round <= 3; round++ {
		step("%d. %s's session dies (a crash, or a pause past its TTL)", round, cur.Node)
		if err := story.Revoke(ctx, world, cur.Node, cur.L.LeaseID); err != nil {
			return o, err
		}
		say("   (simulated: another client revokes %s's lease instead of waiting %v)", cur.Node, ttl)
		next, err := nextTerm()
		if err != nil {
			return o, err
		}
		if next.L.Token() <= cur.L.Token() {
			return o, fmt.Errorf("%s's token %d is not above %s's %d", next.Node, next.L.Token(), cur.Node, cur.L.Token())
		}
		say("   %s leads now with token %d and writes %q: accepted", next.Node, next.L.Token(), "config by "+next.Node)
		late := res.Write(ctx, cur.L.Token(), "late config by "+cur.Node)
		o.Rejected = append(o.Rejected, late)
		if !errors.Is(late, fencing.ErrTokenStale) {
			return o, fmt.Errorf("%s's late write with token %d: %v, want it rejected as stale", cur.Node, cur.L.Token(), late)
		}
		say("   a late write with %s's old token %d: REJECTED (%v)", cur.Node, cur.L.Token(), late)
		// The former leader's supervisor builds a new service and queues
		// again: three candidates' keys once more.
		former := nodes[cur.Node]
		if err := story.WaitFor(ctx, cur.Node+"'s new service", func() (bool, error) { return former.services() == 2, nil }); err != nil {
			return o, err
		}
		if err := story.WaitForKeys(ctx, world, prefix, 3, "candidates' keys"); err != nil {
			return o, err
		}
		say("   %s's supervisor built a new election service and waits in line again", cur.Node)
		cur = next
	}

	step("4. The nodes shut down: the errgroup's context is cancelled")
	stopNodes()
	o.Wait, waited = g.Wait(), true
	if !errors.Is(o.Wait, context.Canceled) {
		return o, fmt.Errorf("the supervisors returned %v, want context.Canceled", o.Wait)
	}
	say("   every election.Supervise resigned, closed its service and returned: %v", o.Wait)
	for name, n := range nodes {
		o.Built[name] = n.services()
	}
	resp, err := world.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return o, err
	}
	if o.KeysAtEnd = resp.Count; o.KeysAtEnd != 0 {
		return o, fmt.Errorf("%d keys left under %s", o.KeysAtEnd, prefix)
	}
	say("   nothing is left in etcd: nobody leads")

	step("Outcome: three terms with rising tokens, each former leader fenced out,")
	say("and each node that lost its session came back into the line by itself.")
	say("The story ended as promised.")
	return o, nil
}
