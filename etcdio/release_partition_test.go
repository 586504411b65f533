package etcdio_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/faultproxy"
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
	u, err := url.Parse(etcdtest.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Listen("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cli, err := embedded.NewClient([]string{"http://" + px.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
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
	err = l.Unlock(uctx)
	took := time.Since(start)
	if !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Unlock cut off from etcd: %v after %v, want ErrLost", err, took)
	}
	if took > ttl+2*time.Second {
		t.Fatalf("Unlock returned %v after etcd was cut off, TTL %v: it outlived the session", took, ttl)
	}
}
