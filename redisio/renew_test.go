package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/redisio"
)

// TestHealthySessionNeverSuspended: a session whose refreshes are all
// acknowledged at once is never Suspended, whatever WithSuspendAfter's
// part: also below 1/3, the part of the TTL after which refreshes used to
// go (as on etcd).
func TestHealthySessionNeverSuspended(t *testing.T) {
	r := testserver.StartRedis(t)
	cli := newClient(t, r)
	const ttl = 3 * time.Second
	s, err := redisio.NewSession(cli, redisio.WithTTL(ttl), redisio.WithSuspendAfter(0.2))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := redisio.NewLock(cli, "healthy-session", redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.NeverSuspended(t, events, 2*ttl) // two TTLs: several refreshes
}
