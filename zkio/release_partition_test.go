package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestReleaseEndsWithTheSession: an Unlock in flight when ZooKeeper is
// cut off returns once the session is lost, not when its context ends.
func TestReleaseEndsWithTheSession(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	const ttl = 2 * time.Second
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{px.Addr()}, "/release/partition", zkio.WithSessionTimeout(ttl)))
	ctx := context.Background()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	px.BlackholeTx()
	px.BlackholeRx()
	defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
	start := time.Now()
	uctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = l.Unlock(uctx)
	took := time.Since(start)
	if !errors.Is(err, primitives.ErrLost) && !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock cut off from ZooKeeper: %v after %v, want ErrLost", err, took)
	}
	if took > ttl+2*time.Second {
		t.Fatalf("Unlock returned %v after ZooKeeper was cut off, TTL %v: it outlived the session", took, ttl)
	}
}

// TestReleaseEndsWithItsContext: an Unlock, a Resign or a Proclaim in
// flight when ZooKeeper is cut off returns when its context ends, with the
// context's error, as on the other backends, rather than when the client
// gives up on the connection or the session is lost. The hold stands, and
// the same call once ZooKeeper answers again succeeds.
func TestReleaseEndsWithItsContext(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const ttl = 6 * time.Second
	for what, c := range map[string]struct {
		// acquire holds and returns the call to cut off.
		acquire func(ctx context.Context, addr string) (call func(context.Context) error, err error)
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
		"proclaim": {func(ctx context.Context, addr string) (func(context.Context) error, error) {
			e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection([]string{addr}, "/release/partition/proclaim", zkio.WithSessionTimeout(ttl)))
			return func(ctx context.Context) error { return e.Proclaim(ctx, "after") }, e.Campaign(ctx, "before")
		}},
	} {
		t.Run(what, func(t *testing.T) {
			px, err := faultproxy.Listen("127.0.0.1:0", servers[0])
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			call, err := c.acquire(context.Background(), px.Addr())
			if err != nil {
				t.Fatal(err)
			}
			px.BlackholeTx()
			px.BlackholeRx()
			const patience = 300 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), patience)
			defer cancel()
			start := time.Now()
			err = call(ctx)
			took := time.Since(start)
			px.UnblackholeTx()
			px.UnblackholeRx()
			if !errors.Is(err, context.DeadlineExceeded) || took > patience+time.Second {
				t.Fatalf("%s cut off from ZooKeeper, its context %v: %v after %v; want DeadlineExceeded at its deadline", what, patience, err, took)
			}
			lctx, lcancel := context.WithTimeout(context.Background(), 2*ttl)
			defer lcancel()
			if err := call(lctx); err != nil {
				t.Fatalf("%s once ZooKeeper answers again: %v", what, err)
			}
		})
	}
}
