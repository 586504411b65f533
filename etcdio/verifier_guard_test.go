package etcdio_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestVerifierGuard: a keyed guard built with etcdio's verifier, on a
// one-member cluster of its own whose member is stopped at the end (the
// store down).
func TestVerifierGuard(t *testing.T) {
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
