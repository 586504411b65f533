package etcdio_test

import (
	"context"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/conformance"
)

// TestBarrierConformance runs the suite's barrier and double-barrier
// sections against etcdio; each party has its own client and session, so
// that KillSession revokes exactly that party's lease.
func TestBarrierConformance(t *testing.T) {
	testkit.NoLeaks(t)
	base := etcdBackend(t)
	admin := newClient(t)
	var sessions sync.Map // party -> *etcdio.Session
	key := func(name string) string { return "/conformance/" + name }
	b := conformance.BarrierBackend{Backend: base}
	b.NewBarrier = func(t *testing.T, name string) barrier.Barrier {
		t.Helper()
		x, err := etcdio.NewBarrier(newClient(t), key(name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Delete(context.Background(), key(name)) })
		return x
	}
	b.NewDoubleBarrier = func(t *testing.T, name string, count int) barrier.DoubleBarrier {
		t.Helper()
		cli := newClient(t)
		s, err := etcdio.NewSession(cli, etcdio.WithTTL(conformanceTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(etcdio.NewDoubleBarrier(cli, key(name), count, etcdio.WithSession(s)))
		sessions.Store(d, s)
		return d
	}
	b.KillSession = func(t *testing.T, svc any) {
		t.Helper()
		s, ok := sessions.Load(svc)
		if !ok {
			base.KillSession(t, svc)
			return
		}
		if _, err := admin.Revoke(context.Background(), s.(*etcdio.Session).LeaseID()); err != nil {
			t.Fatal(err)
		}
	}
	b.BarrierKeys = func(t *testing.T, name string) []string {
		t.Helper()
		var keys []string
		for _, get := range []func() (*clientv3.GetResponse, error){
			func() (*clientv3.GetResponse, error) { return admin.Get(context.Background(), key(name)) },
			func() (*clientv3.GetResponse, error) {
				return admin.Get(context.Background(), key(name)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
			},
		} {
			resp, err := get()
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range resp.Kvs {
				keys = append(keys, string(kv.Key))
			}
		}
		return keys
	}
	t.Run("Barrier", func(t *testing.T) {
		t.Parallel()
		conformance.TestBarrier(t, b)
	})
	t.Run("DoubleBarrier", func(t *testing.T) {
		t.Parallel()
		conformance.TestDoubleBarrier(t, b)
	})
}
