package etcdio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestReleaseEndsWithTheSession: an Unlock in flight when etcd is cut off
// returns once the session is lost (with an error wrapping ErrLost), not
// when its own context ends: lock.Do, which releases with a 10 s bound,
// would otherwise return that long after the loss.
func TestReleaseEndsWithTheSession(t *testing.T) {
	testkit.NoLeaks(t)
	cli, px := etcdtest.NewProxiedClient(t)
	const ttl = 2 * time.Second
	l := testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, prefixOf(t), etcdio.WithTTL(ttl)))
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
	err := l.Unlock(uctx)
	took := time.Since(start)
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Unlock cut off from etcd: %v after %v, want ErrLost", err, took)
	}
	if took > ttl+2*time.Second {
		t.Fatalf("Unlock returned %v after etcd was cut off, TTL %v: it outlived the session", took, ttl)
	}
}
