package redisio

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testserver"
)

// newClient returns a client of r, closed when t ends (as the external
// tests' newClient does).
func newClient(t testing.TB, r *testserver.Redis) *redis.Client {
	cli := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { cli.Close() })
	return cli
}

// lockOn opens a lock service on name, on a client and a session of its
// own, closed when t ends.
func lockOn(t *testing.T, r *testserver.Redis, name string, opts ...Option) *service {
	t.Helper()
	v, err := newService(newClient(t, r), name, kindLock, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}
