package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/zkio"
)

// TestProclaimEndsWithItsContext: a Proclaim in flight when ZooKeeper is
// cut off returns when its context ends, with the context's error, as on
// the other backends; it does not wait for the session to be lost.
func TestProclaimEndsWithItsContext(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	const ttl = 6 * time.Second
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection([]string{px.Addr()}, "/proclaim/partition", zkio.WithSessionTimeout(ttl)))
	if err := e.Campaign(context.Background(), "before"); err != nil {
		t.Fatal(err)
	}
	px.BlackholeTx()
	px.BlackholeRx()
	defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
	const patience = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	start := time.Now()
	err = e.Proclaim(ctx, "after")
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > patience+time.Second {
		t.Fatalf("Proclaim cut off from ZooKeeper, its context %v: %v after %v; want DeadlineExceeded at its deadline", patience, err, took)
	}
}
