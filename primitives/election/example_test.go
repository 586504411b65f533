package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// Lead campaigns, runs a function for as long as this candidate leads, and
// resigns when it returns. The term's token fences the leader's requests.
func ExampleLead() {
	// An in-process etcd server, for the example; a real program dials its
	// cluster.
	srv, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	e, err := etcdio.NewElection(cli, "/example/leader")
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()

	ctx := context.Background()
	err = election.Lead(ctx, e, "node-1", func(ctx context.Context, l election.Leadership) error {
		// Leader's work goes here; ctx is cancelled if leadership is lost.
		fmt.Println("leading as:", l.Value)
		fmt.Println("with a token:", l.Token() > 0)
		now, err := e.Leader(ctx)
		fmt.Println("everyone sees this leader:", err == nil && now.Key == l.Key)
		return nil
	})
	fmt.Println("Lead returned:", err)

	_, err = e.Leader(ctx)
	fmt.Println("resigned, nobody leads:", errors.Is(err, election.ErrNoLeader))

	// Output:
	// leading as: node-1
	// with a token: true
	// everyone sees this leader: true
	// Lead returned: <nil>
	// resigned, nobody leads: true
}

// Supervise keeps a node in the election for as long as it runs: here the
// leader runs a pool of workers, loses its session in the middle of its
// first term (its lease is revoked, as a pause past the TTL would end it),
// and Supervise builds a new service and leads again, with a higher token,
// until the work is done.
func ExampleSupervise() {
	srv, err := embedded.Start()
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	cli, err := srv.NewClient()
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	// Supervise owns the services it builds: one per session.
	newService := func(ctx context.Context) (election.Service, error) {
		return etcdio.NewElection(cli, "/example/pool", etcdio.WithContext(ctx))
	}
	jobs := make(chan int, 9)
	for j := range 9 {
		jobs <- j
	}
	close(jobs)

	var done atomic.Int32
	var last fencing.Token
	lead := func(ctx context.Context, l election.Leadership) error {
		fmt.Println("leading, token above the last term's:", l.Token() > last)
		first := last == 0
		last = l.Token()
		// The pool: its workers stop when the term ends.
		pool, pctx := errgroup.WithContext(ctx)
		for range 3 {
			pool.Go(func() error {
				if first {
					<-pctx.Done() // the first term is lost before any work
					return pctx.Err()
				}
				for range jobs {
					// A real worker attaches l.Token() to each write.
					done.Add(1)
				}
				return nil
			})
		}
		if first {
			// Simulate a crash of this node's session. The revoke does not
			// ride the term's ctx: the loss it causes ends that ctx, maybe
			// before the revoke's own reply arrives.
			if _, err := cli.Revoke(context.WithoutCancel(ctx), clientv3.LeaseID(l.LeaseID)); err != nil {
				return err
			}
		}
		err := pool.Wait()
		if first {
			fmt.Println("term lost:", errors.Is(context.Cause(ctx), primitives.ErrLost))
		}
		return err // nil: the work is done, and Supervise returns
	}

	var events []string
	g, ctx := errgroup.WithContext(context.Background())
	g.Go(func() error {
		return election.Supervise(ctx, newService, "node-1", lead,
			election.WithBackoff(10*time.Millisecond, time.Second),
			election.OnRetry(func(attempt int, err error) {
				fmt.Println("rejoining, attempt", attempt)
			}),
			election.OnEvent(func(e primitives.Event) {
				switch e.(type) {
				case primitives.Acquired, primitives.Lost, primitives.Released:
					events = append(events, fmt.Sprintf("%T", e))
				}
			}))
	})
	fmt.Println("errgroup returned:", g.Wait())
	fmt.Println("jobs done:", done.Load())
	fmt.Println("events:", events)

	// Output:
	// leading, token above the last term's: true
	// term lost: true
	// rejoining, attempt 1
	// leading, token above the last term's: true
	// errgroup returned: <nil>
	// jobs done: 9
	// events: [primitives.Acquired primitives.Lost primitives.Acquired primitives.Released]
}
