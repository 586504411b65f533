package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
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
