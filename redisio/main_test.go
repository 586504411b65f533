package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/metrics"
)

// newClient returns a client of r, closed when t ends.
func newClient(t testing.TB, r *testserver.Redis) *redis.Client {
	t.Helper()
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, PoolSize: 4})
	t.Cleanup(func() { cli.Close() })
	return cli
}

// metered starts a Redis server for t, checks that t leaves no goroutine
// behind, and returns the server, a registry with disco's metrics, and a
// context that ends after d or with t.
func metered(t *testing.T, d time.Duration) (*testserver.Redis, *prometheus.Registry, *metrics.Metrics, context.Context) {
	t.Helper()
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return r, reg, m, ctx
}
