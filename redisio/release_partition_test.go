package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestReleaseEndsWithTheSession: an Unlock in flight when Redis is cut off
// returns once the session is lost, not when its context ends.
func TestReleaseEndsWithTheSession(t *testing.T) {
	t.Parallel()
	px, cli := proxied(t, testserver.StartRedis(t), redis.Options{})
	const ttl = 2 * time.Second
	l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, "release/partition", redisio.WithTTL(ttl)))
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
	if !errors.Is(err, primitives.ErrLost) && !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock cut off from Redis: %v after %v, want ErrLost", err, took)
	}
	if took > ttl+2*time.Second {
		t.Fatalf("Unlock returned %v after Redis was cut off, TTL %v: it outlived the session", took, ttl)
	}
}
