package etcdio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestVerifierGuard: a keyed guard built with etcdio's verifier, on a
// one-member cluster of its own whose member is stopped at the end (the
// store down).
func TestVerifierGuard(t *testing.T) {
	c, cli := clusterOfItsOwn(t)
	const prefix = "/orders/42"
	// A revision at which no one held the lock: forged if presented.
	before := etcdRevision(t, cli)
	v, err := etcdio.NewVerifier(cli, "lock", "")
	if err != nil {
		t.Fatal(err)
	}
	verifiertest.Run(t, verifiertest.Backend{
		Verifier: v,
		Scope:    prefix,
		Hold: verifiertest.LockHold(t, func() (lock.Service, error) {
			return etcdio.NewLock(cli, prefix, etcdio.WithTTL(time.Second)) // Close with etcd down: the lease is lost soon
		}),
		Forged: func(context.Context) fencing.Token { return before },
		Down: func() {
			if err := c.Member(0).Stop(); err != nil {
				t.Fatal(err)
			}
		},
	})
}

// etcdRevision writes a key of no primitive and returns its revision.
func etcdRevision(t *testing.T, cli *clientv3.Client) fencing.Token {
	t.Helper()
	resp, err := cli.Put(context.Background(), "/unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	return fencing.Token(resp.Header.Revision)
}

// TestVerifierLockCompacted: once etcd has compacted the revision of a
// lock's token, the verifier cannot read who held then. A token of a holder
// whose key came after it is forged, as before; any other is unverified
// (an error not wrapping ErrTokenForged), so a fresh guard refuses it and
// keeps its mark. Here the superseded holder b's token is presented after
// c, which queued while a held, took over: c's key is older than b's
// token, and reading the present alone cannot tell that b, not c, held at
// that revision.
func TestVerifierLockCompacted(t *testing.T) {
	_, cli := clusterOfItsOwn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix = "/compacted/lock"
	owners := make([]lock.Service, 3)
	for i := range owners {
		owners[i] = testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, prefix))
	}
	a, b, later := owners[0], owners[1], owners[2]
	if _, err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan lock.Grant, 2)
	for i, o := range []lock.Service{b, later} {
		go func() {
			g, err := o.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
		testkit.Eventually(t, 10*time.Second, "the owner queued", func() bool {
			resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && resp.Count == int64(i+2)
		})
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	gb := <-got
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	gc := <-got
	v, err := etcdio.NewVerifier(cli, "lock", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(ctx, "", gb.FencingToken); !errors.Is(err, fencing.ErrTokenForged) {
		t.Fatalf("b's token %d after c took over: %v, want ErrTokenForged", gb.FencingToken, err)
	}
	now := etcdRevision(t, cli)
	if _, err := cli.Compact(ctx, int64(now)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what string
		tok  fencing.Token
	}{{"b's token (superseded)", gb.FencingToken}, {"c's token (the holder now)", gc.FencingToken}} {
		err := v.Verify(ctx, "", tc.tok)
		if err == nil || errors.Is(err, fencing.ErrTokenForged) {
			t.Errorf("%s %d, compacted: %v; want an error, not ErrTokenForged (cannot tell)", tc.what, tc.tok, err)
		}
		if err := guard.New(guard.WithVerifier(v)).Check(tc.tok); err == nil {
			t.Errorf("%s %d, compacted: a fresh guard admitted it", tc.what, tc.tok)
		}
	}
	if err := v.Verify(ctx, "", now); err != nil {
		t.Errorf("a revision of c's tenure after the compaction (%d): %v, want valid", now, err)
	}
}

// clusterOfItsOwn starts a one-member cluster for one test, which may stop
// its member or compact it, and a client of it, both closed when t ends.
func clusterOfItsOwn(t *testing.T) (*embedded.Cluster, *clientv3.Client) {
	t.Helper()
	c, err := embedded.StartCluster(1, embedded.WithUnsafeNoFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cli, err := c.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return c, cli
}
