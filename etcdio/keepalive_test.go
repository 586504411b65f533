package etcdio_test

import (
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
)

// TestHealthySessionNeverSuspended: a session whose keepalives are all
// acknowledged at once is never Suspended, whatever WithSuspendAfter's part:
// also below 1/3, the part of the TTL after which keepalives used to go.
func TestHealthySessionNeverSuspended(t *testing.T) {
	cli := newClient(t)
	const ttl = 3 * time.Second
	s, err := etcdio.NewSession(cli, etcdio.WithTTL(ttl), etcdio.WithSuspendAfter(0.2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := etcdio.NewLock(cli, prefixOf(t), etcdio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := testCtx(t, 30*time.Second)
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.NeverSuspended(t, events, 2*ttl) // two TTLs: several keepalives
}
