package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/redisio"
)

// TestObserveUnreadDeliversNothing: Observe's first delivery is a read made
// after the call. While Redis cannot be read, Observe delivers nothing
// (its channel closes when its context ends) rather than what the candidate
// last knew, here nothing at all: the old code delivered "no leader" while
// another candidate led. Once Redis answers, it delivers the leader.
func TestObserveUnreadDeliversNothing(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "observe/unread"
	leader := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(newClient(t, r), name))
	if err := leader.Campaign(ctx, "leader"); err != nil {
		t.Fatal(err)
	}
	term, _ := leader.Term()
	px, cli := proxied(t, r, redis.Options{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	observer := testkit.ClosedAtEnd[election.Service](t)(redisio.NewElection(cli, name, redisio.WithTTL(30*time.Second)))

	px.BlackholeTx()
	px.BlackholeRx()
	octx, ocancel := context.WithTimeout(ctx, time.Second)
	defer ocancel()
	for l := range observer.Observe(octx) {
		t.Fatalf("Observe with Redis out of reach delivered %+v; %+v leads", l, term)
	}
	px.UnblackholeTx()
	px.UnblackholeRx()

	octx, ocancel = context.WithTimeout(ctx, 30*time.Second)
	defer ocancel()
	select {
	case l, ok := <-observer.Observe(octx):
		if !ok || l.Key != term.Key || l.FencingToken != term.FencingToken {
			t.Fatalf("Observe once Redis answers: %+v (open %v), want %+v", l, ok, term)
		}
	case <-octx.Done():
		t.Fatal("Observe once Redis answers: nothing delivered")
	}
}
