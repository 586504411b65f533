package redisio_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/internal/testserver"
)

// noLeaks checks, when t ends, that t started no goroutine it left running.
func noLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// newClient returns a client of r, closed when t ends.
func newClient(t testing.TB, r *testserver.Redis) *redis.Client {
	t.Helper()
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 4})
	t.Cleanup(func() { cli.Close() })
	return cli
}
