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
		Hold: func(ctx context.Context) (fencing.Token, func(context.Context) error, error) {
			l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(time.Second)) // Close with etcd down: the lease is lost soon
			if err != nil {
				return 0, nil, err
			}
			t.Cleanup(func() { l.Close() })
			g, err := l.Lock(ctx)
			if err != nil {
				return 0, nil, err
			}
			return g.Token(), l.Unlock, nil
		},
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
