package zkio_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/barrier"
	"github.com/ahrtr/disco/primitives/conformance"
	"github.com/ahrtr/disco/zkio"
)

// TestBarrierConformance runs the suite's barrier and double-barrier
// sections against zkio. Each barrier user connects per call (a barrier
// made with servers); each double-barrier party has a session of its own,
// so that KillSession ends exactly that party's.
func TestBarrierConformance(t *testing.T) {
	servers := startZooKeeper(t)
	testkit.NoLeaks(t)
	base := zkBackend(t, servers)
	admin := adminConn(t, servers)
	var sessions sync.Map // party -> *zkio.Session
	path := func(name string) string { return "/conformance/" + name }
	b := conformance.BarrierBackend{Backend: base}
	b.NewBarrier = func(t *testing.T, name string) barrier.Barrier {
		t.Helper()
		x, err := zkio.NewBarrier(servers, path(name), zkio.WithTTL(conformanceTimeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(path(name), -1) })
		return x
	}
	b.NewDoubleBarrier = func(t *testing.T, name string, count int) barrier.DoubleBarrier {
		t.Helper()
		s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(conformanceTimeout)))
		d := testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(zkio.NewDoubleBarrier(nil, path(name), count, zkio.WithSession(s)))
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
		zkio.KillSession(s.(*zkio.Session))
	}
	b.BarrierKeys = func(t *testing.T, name string) []string {
		t.Helper()
		return subtree(t, admin, path(name))
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

// subtree lists p and every znode below it, if p exists.
func subtree(t *testing.T, admin *zk.Conn, p string) []string {
	t.Helper()
	kids, _, err := admin.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := []string{p}
	for _, k := range kids {
		out = append(out, subtree(t, admin, p+"/"+k)...)
	}
	return out
}
