package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestReleaseEndsWithItsContext: an Unlock (a Resign) in flight when
// ZooKeeper is cut off returns when its context ends, with the context's
// error, as on the other backends, rather than when the client gives up
// on the connection or the session is lost. The hold stands, and an
// Unlock once ZooKeeper answers again releases it.
func TestReleaseEndsWithItsContext(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const ttl = 6 * time.Second
	for what, c := range map[string]struct {
		acquire func(ctx context.Context, addr string) (release func(context.Context) error, err error)
	}{
		"lock": {func(ctx context.Context, addr string) (func(context.Context) error, error) {
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{addr}, "/release/partition/lock", zkio.WithSessionTimeout(ttl)))
			_, err := l.Lock(ctx)
			return l.Unlock, err
		}},
		"election": {func(ctx context.Context, addr string) (func(context.Context) error, error) {
			e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection([]string{addr}, "/release/partition/election", zkio.WithSessionTimeout(ttl)))
			return e.Resign, e.Campaign(ctx, "v")
		}},
	} {
		t.Run(what, func(t *testing.T) {
			px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			release, err := c.acquire(context.Background(), px.Addr())
			if err != nil {
				t.Fatal(err)
			}
			px.BlackholeTx()
			px.BlackholeRx()
			const patience = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			start := time.Now()
			err = release(ctx)
			took := time.Since(start)
			px.UnblackholeTx()
			px.UnblackholeRx()
			if !errors.Is(err, context.DeadlineExceeded) || took > patience+time.Second {
				t.Fatalf("release cut off from ZooKeeper, its context %v: %v after %v; want DeadlineExceeded at its deadline", patience, err, took)
			}
			lctx, lcancel := context.WithTimeout(context.Background(), 2*ttl)
			defer lcancel()
			if err := release(lctx); err != nil {
				t.Fatalf("release once ZooKeeper answers again: %v", err)
			}
		})
	}
}
