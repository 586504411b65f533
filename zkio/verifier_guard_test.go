package zkio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestVerifierGuard: a keyed guard built with zkio's verifier, on a
// ZooKeeper server of its own that is stopped at the end (the store down).
func TestVerifierGuard(t *testing.T) {
	t.Parallel()
	zk := testserver.StartZooKeeper(t)
	// A short session: once the server is stopped, the locks' Close ends
	// when the session does.
	s, err := zkio.NewSession([]string{zk.Addr}, zkio.WithSessionTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	v, err := zkio.NewVerifier(s, "lock", "")
	if err != nil {
		t.Fatal(err)
	}
	hold := func(path string) func(context.Context) (fencing.Token, func(context.Context) error, error) {
		return verifiertest.LockHold(t, func() (lock.Service, error) { return zkio.NewLock(nil, path, zkio.WithSession(s)) })
	}
	const path = "/orders/42"
	verifiertest.Run(t, verifiertest.Backend{
		Verifier: v,
		Scope:    path,
		Hold:     hold(path),
		Forged: func(ctx context.Context) fencing.Token {
			// Another lock's token: a zxid below the ensemble's, which no
			// holder of path ever had.
			tok, _, err := hold("/orders/43")(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		},
		Down: zk.Stop,
	})
}
