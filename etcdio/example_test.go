package etcdio_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// A lock on etcd, and a guard that refuses its earlier holder's token once
// a later holder has written.
func ExampleNewLock() {
	endpoints, stop, err := embedded.StartOrEnv() // an etcd of the example's own, or ETCD_ENDPOINTS
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	cli, err := embedded.NewClient(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	ctx := context.Background()
	resource := guard.New()
	var tokens []fencing.Token
	for range 2 { // two holders in turn, as two processes would be
		l, err := etcdio.NewLock(cli, "/example/etcdio/lock")
		if err != nil {
			log.Fatal(err)
		}
		err = lock.Do(ctx, l, func(ctx context.Context, g lock.Grant) error {
			tokens = append(tokens, g.Token())
			return resource.Check(g.Token()) // the write, fenced
		})
		l.Close()
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("the second holder's token is higher:", tokens[1] > tokens[0])
	fmt.Println("the first holder's late write is refused:", errors.Is(resource.Check(tokens[0]), fencing.ErrTokenStale))
	// Output:
	// the second holder's token is higher: true
	// the first holder's late write is refused: true
}

// Several primitives on one session: one lease, one keepalive stream, one
// event loop. Close of a primitive keeps the session; the session's Close
// revokes the lease, releasing everything at once.
func ExampleNewSession() {
	endpoints, stop, err := embedded.StartOrEnv()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	cli, err := embedded.NewClient(endpoints)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()

	s, err := etcdio.NewSession(cli)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	l, err := etcdio.NewLock(cli, "/example/etcdio/jobs", etcdio.WithSession(s))
	if err != nil {
		log.Fatal(err)
	}
	e, err := etcdio.NewElection(cli, "/example/etcdio/leader", etcdio.WithSession(s))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	g, err := l.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Campaign(ctx, "node-1"); err != nil {
		log.Fatal(err)
	}
	term, _ := e.Term()
	fmt.Println("both on one lease:", g.LeaseID == term.LeaseID && g.LeaseID == int64(s.LeaseID()))
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("the session's Close ended both:",
		errors.Is(l.Err(), primitives.ErrClosed), errors.Is(e.Err(), primitives.ErrClosed))
	// Output:
	// both on one lease: true
	// the session's Close ended both: true true
}
