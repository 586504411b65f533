package redisio

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testserver"
)

// TestSlowRefreshesKeepSession: while every reply of Redis takes longer
// than a third of the TTL but less than the TTL (a slow disk under
// appendfsync always, a loaded server), refreshes go out every TTL/3
// anyway, each is acknowledged in time to count by the time it was sent,
// and the session lives. A refresher that waited for each refresh before
// the next, or gave up on one after a third of the TTL, lost the session
// within a TTL.
func TestSlowRefreshesKeepSession(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := refreshScript.Load(ctx, newClient(t, r)).Err(); err != nil {
		t.Fatal(err) // so that each refresh is one round trip
	}
	px, err := faultproxy.Listen("127.0.0.1:0", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	// Connections opened before the replies slow down, each with no
	// handshake to wait for later: only the refreshes' replies are slow.
	cli := redis.NewClient(&redis.Options{Addr: px.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { cli.Close() })
	var conns []*redis.Conn
	for range 4 {
		c := cli.Conn()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close() // back to the pool
	}
	s, err := NewSession(cli, WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	px.DelayRx(700 * time.Millisecond) // each reply: over TTL/3, under TTL
	defer px.UndelayRx()
	select {
	case <-s.Done():
		t.Fatalf("every reply 0.7 s late, the TTL %v: session ended: %v", ttl, s.Err())
	case <-time.After(4 * ttl):
	}
}
