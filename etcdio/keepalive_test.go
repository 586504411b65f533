package etcdio_test

import (
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/primitives"
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
	// Two TTLs: several keepalives, each acknowledged within milliseconds.
	quiet := time.After(2 * ttl)
	for {
		select {
		case ev := <-events:
			if sus, ok := ev.(primitives.Suspended); ok {
				t.Fatalf("healthy session Suspended (%v of its TTL left): keepalives go less often than WithSuspendAfter allows",
					time.Until(sus.Deadline))
			}
		case <-quiet:
			return
		}
	}
}
