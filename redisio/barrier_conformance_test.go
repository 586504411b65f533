package redisio_test

import (
	"context"
	"sync"
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/redisio"
)

// TestBarrierConformance runs the suite's barrier and double-barrier
// sections against redisio; each party has its own client and session, so
// that KillSession deletes exactly that party's session key.
func TestBarrierConformance(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	admin := newClient(t, r)
	var sessions sync.Map // party -> *redisio.Session
	b := conformance.BarrierBackend{Backend: redisBackend(t, r, nil)}
	b.NewBarrier = func(t *testing.T, name string) barrier.Barrier {
		t.Helper()
		x, err := redisio.NewBarrier(newClient(t, r), name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	b.NewDoubleBarrier = func(t *testing.T, name string, count int) barrier.DoubleBarrier {
		t.Helper()
		cli := newClient(t, r)
		s, err := redisio.NewSession(cli, redisio.WithTTL(conformanceTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(redisio.NewDoubleBarrier(cli, name, count, redisio.WithSession(s)))
		sessions.Store(d, s)
		return d
	}
	b.KillSession = func(t *testing.T, svc any) {
		t.Helper()
		s, ok := sessions.Load(svc)
		if !ok {
			t.Fatalf("KillSession given a party the factory did not make: %T", svc)
		}
		if err := admin.Del(context.Background(), s.(*redisio.Session).Key()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	b.BarrierKeys = func(t *testing.T, name string) []string { return nameKeys(t, admin, name) }
	t.Run("Barrier", func(t *testing.T) {
		t.Parallel()
		conformance.TestBarrier(t, b)
	})
	t.Run("DoubleBarrier", func(t *testing.T) {
		t.Parallel()
		conformance.TestDoubleBarrier(t, b)
	})
}
