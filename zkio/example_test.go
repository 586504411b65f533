package zkio_test

import (
	"context"
	"log"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// A lock on a ZooKeeper ensemble, in Curator's InterProcessMutex layout:
// each write under it carries the hold's token, the czxid of its znode.
// (Not run by go test: it needs your ensemble.)
func ExampleNewLock() {
	servers := []string{"zk1:2181", "zk2:2181", "zk3:2181"}
	l, err := zkio.NewLock(servers, "/locks/orders")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	err = lock.Do(context.Background(), l, func(ctx context.Context, g lock.Grant) error {
		return write(ctx, g.Token()) // ctx ends the moment the hold is lost
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Several primitives on one ZooKeeper session: one connection, one event
// loop. Curator's LeaderLatch participants on the same path agree on who
// leads. (Not run by go test: it needs your ensemble.)
func ExampleNewSession() {
	s, err := zkio.NewSession([]string{"zk1:2181"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	e, err := zkio.NewElection(nil, "/elections/scheduler", zkio.WithSession(s))
	if err != nil {
		log.Fatal(err)
	}
	err = election.Lead(context.Background(), e, "node-1", func(ctx context.Context, l election.Leadership) error {
		return write(ctx, l.Token())
	})
	if err != nil {
		log.Fatal(err)
	}
}

// write stands for the owner's request to its resource, stamped with t.
func write(ctx context.Context, t fencing.Token) error { return nil }
