package redisio_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testserver"
)

// newClient returns a client of r, closed when t ends.
func newClient(t testing.TB, r *testserver.Redis) *redis.Client {
	t.Helper()
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 4})
	t.Cleanup(func() { cli.Close() })
	return cli
}
