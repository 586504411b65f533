package memio_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// A test of a leader-elected worker, with no server and no waiting for
// real TTLs: the leader's session is suspended (its work stops at once,
// WithCancelOnSuspend), then expires; the next candidate leads with a
// higher token, and the resource's guard rejects the old leader's late
// write.
func Example() {
	clock := memio.NewFakeClock(time.Unix(0, 0))
	st := memio.NewStore(memio.WithClock(clock))
	resource := guard.New() // what the leader writes to checks its token

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The worker under test: it leads, writes with its term's token, and
	// stops when its context ends.
	built := make(chan election.Service, 4)
	terms := make(chan election.Leadership, 4)
	stopped := make(chan error, 4)
	newService := func(ctx context.Context) (election.Service, error) {
		e, err := memio.NewElection(st, "/workers/leader", memio.WithCancelOnSuspend())
		if err == nil {
			built <- e
		}
		return e, err
	}
	work := func(ctx context.Context, term election.Leadership) error {
		_ = resource.Check(term.Token()) // the write
		terms <- term
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil
	}
	supervised := make(chan error, 1)
	go func() {
		supervised <- election.Supervise(ctx, newService, "worker-a", work,
			election.WithBackoff(time.Millisecond, time.Millisecond))
	}()
	a, first := <-built, <-terms
	fmt.Println("a leads")

	// A second candidate waits behind it.
	b, _ := memio.NewElection(st, "/workers/leader")
	defer b.Close()
	bLeads := make(chan error, 1)
	go func() { bLeads <- b.Campaign(ctx, "worker-b") }()
	for len(st.Keys("/workers/leader/")) < 2 { // until b's candidacy is in
		time.Sleep(time.Millisecond) // polling interval
	}

	memio.SessionOf(a).Suspend()
	fmt.Println("a's work stopped at Suspended:", errors.Is(<-stopped, primitives.ErrSuspended))
	memio.SessionOf(a).Expire()
	clock.Advance(10 * time.Second)

	if err := <-bLeads; err != nil {
		fmt.Println(err)
		return
	}
	next, _ := b.Term()
	fmt.Println("b leads with a higher token:", next.Token() > first.Token())
	fmt.Println("b's write admitted:", resource.Check(next.Token()) == nil)
	fmt.Println("a's late write rejected:", errors.Is(resource.Check(first.Token()), fencing.ErrTokenStale))

	cancel()
	fmt.Println("supervisor done:", errors.Is(<-supervised, context.Canceled))
	// Output:
	// a leads
	// a's work stopped at Suspended: true
	// b leads with a higher token: true
	// b's write admitted: true
	// a's late write rejected: true
	// supervisor done: true
}
