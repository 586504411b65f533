package etcdio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// verify asserts what v says of t: nil if valid, else an error wrapping
// fencing.ErrTokenForged.
func verify(t *testing.T, v *etcdio.Verifier, what string, scope string, tok fencing.Token, valid bool) {
	t.Helper()
	err := v.Verify(context.Background(), scope, tok)
	switch {
	case valid && err != nil:
		t.Errorf("%s (token %d): %v, want valid", what, tok, err)
	case !valid && !errors.Is(err, fencing.ErrTokenForged):
		t.Errorf("%s (token %d): %v, want ErrTokenForged", what, tok, err)
	}
}

// revisionNow returns the cluster's revision.
func revisionNow(t *testing.T, cli *clientv3.Client) fencing.Token {
	t.Helper()
	resp, err := cli.Get(context.Background(), "/no/such/key")
	if err != nil {
		t.Fatal(err)
	}
	return fencing.Token(resp.Header.Revision)
}

// TestVerifierKinds: etcdio's verifiers pass the verifier kit's laws for
// every kind (verifiertest.RunKinds).
func TestVerifierKinds(t *testing.T) {
	testkit.NoLeaks(t)
	cli := newClient(t)
	verifiertest.RunKinds(t, verifiertest.Kinds{
		NewVerifier: func(t *testing.T, kind, name string) guard.Verifier {
			v, err := etcdio.NewVerifier(cli, kind, name)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
		Name: func(t *testing.T, suffix string) string { return prefixOf(t) + "/" + suffix },
		NewLock: func(t *testing.T, name string) lock.Service {
			return testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, name))
		},
		NewRWLock: func(t *testing.T, name string) rwlock.Service {
			t.Cleanup(func() { _ = etcdio.RetireRWLock(context.Background(), cli, name) })
			return testkit.ClosedAtEnd[rwlock.Service](t)(etcdio.NewRWLock(cli, name))
		},
		NewElection: func(t *testing.T, name string) election.Service {
			return testkit.ClosedAtEnd[election.Service](t)(etcdio.NewElection(cli, name))
		},
		NewSemaphore: func(t *testing.T, name string, n int) semaphore.Service {
			t.Cleanup(func() { _ = etcdio.RetireSemaphore(context.Background(), cli, name) })
			return testkit.ClosedAtEnd[semaphore.Service](t)(etcdio.NewSemaphore(cli, name, n))
		},
	})
}

// TestVerifierLockBeforeAnyGrant: a revision from before anyone held the
// lock, a real revision of the cluster, is no grant's.
func TestVerifierLockBeforeAnyGrant(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := context.Background()
	cli := newClient(t)
	prefix := prefixOf(t)
	before := revisionNow(t, cli) // no one held the lock then
	v, err := etcdio.NewVerifier(cli, "lock", prefix)
	if err != nil {
		t.Fatal(err)
	}
	a := testkit.ClosedAtEnd[lock.Service](t)(etcdio.NewLock(cli, prefix))
	g, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, v, "the holder's token", "", g.Token(), true)
	verify(t, v, "a token from before any grant", "", before, false)
	verify(t, v, "a token above the cluster's revision", "", revisionNow(t, cli)+1000, false)
}

// TestVerifierElection: a verifier of every name refuses a call without
// one (an unkeyed guard's), and the creation revision of a waiting
// candidate, a real key's, is no leader's token.
func TestVerifierElection(t *testing.T) {
	testkit.NoLeaks(t)
	ctx := context.Background()
	cli := newClient(t)
	prefix := prefixOf(t)
	v, err := etcdio.NewVerifier(cli, "election", "")
	if err != nil {
		t.Fatal(err)
	}
	a := testkit.ClosedAtEnd[election.Service](t)(etcdio.NewElection(cli, prefix))
	b := testkit.ClosedAtEnd[election.Service](t)(etcdio.NewElection(cli, prefix))
	if err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	la, _ := a.Term()
	verify(t, v, "an unkeyed guard's call to a verifier with no name", "", la.Token(), false)
	waiting := make(chan error, 1)
	go func() { waiting <- b.Campaign(ctx, "b") }()
	testkit.Eventually(t, 5*time.Second, "b queued", func() bool {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	verify(t, v, "a waiting candidate's creation revision", prefix, fencing.Token(resp.Kvs[0].CreateRevision), false)
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
}

// TestVerifierBounded: with etcd out of reach, Verify fails within its
// bound with an error that is not ErrTokenForged (the guard rejects the
// request as unverified and keeps its mark).
func TestVerifierBounded(t *testing.T) {
	testkit.NoLeaks(t)
	cli, px := etcdtest.NewProxiedClient(t)
	v, err := etcdio.NewVerifier(cli, "lock", prefixOf(t), etcdio.WithVerifierTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	px.BlackholeTx()
	px.BlackholeRx()
	start := time.Now()
	err = v.Verify(context.Background(), "", 5)
	if err == nil || errors.Is(err, fencing.ErrTokenForged) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Verify with etcd out of reach: %v, want a deadline error, not ErrTokenForged", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Verify took %v with a 300ms bound", d)
	}
}

func TestNewVerifierRefusesBadInput(t *testing.T) {
	cli := newClient(t)
	for _, c := range []struct {
		what       string
		cli        *clientv3.Client
		kind, name string
		opts       []etcdio.VerifierOption
	}{
		{"nil client", nil, "lock", "/x", nil},
		{"unknown kind", cli, "mutex", "/x", nil},
		{"name /", cli, "lock", "/", nil},
		{"nil option", cli, "lock", "/x", []etcdio.VerifierOption{nil}},
	} {
		if _, err := etcdio.NewVerifier(c.cli, c.kind, c.name, c.opts...); !errors.Is(err, etcdio.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.what, err)
		}
	}
}
