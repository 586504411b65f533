package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/faultproxy"
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

// proxied returns a fault proxy in front of r and a client through it
// with opts (Addr set here); both are closed when t ends.
func proxied(t testing.TB, r *testserver.Redis, opts redis.Options) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	px, err := faultproxy.Listen("127.0.0.1:0", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	opts.Addr = px.Addr()
	cli := redis.NewClient(&opts)
	t.Cleanup(func() { cli.Close() })
	return px, cli
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
