package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard/verifiertest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestVerifierGuard: a keyed guard built with redisio's verifier, on a
// Redis server of its own that is stopped at the end (the store down).
func TestVerifierGuard(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	cli := newClient(t, r)
	v, err := redisio.NewVerifier(cli, "lock", "")
	if err != nil {
		t.Fatal(err)
	}
	const name = "orders/42"
	verifiertest.Run(t, verifiertest.Backend{
		Verifier: v,
		Scope:    name,
		// A short TTL: once Redis is stopped, Close ends when the hold may
		// have expired.
		Hold: verifiertest.LockHold(t, func() (lock.Service, error) {
			return redisio.NewLock(cli, name, redisio.WithTTL(time.Second))
		}),
		Forged: func(ctx context.Context) fencing.Token {
			// A waiter that gives up: its Created is a count of the name's
			// counter that no hold was ever granted as a token.
			w, err := redisio.NewLock(cli, name)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			wctx, cancel := context.WithCancel(ctx)
			waited := make(chan error, 1)
			go func() { _, err := w.Lock(wctx); waited <- err }()
			testkit.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
				n, err := cli.ZCard(ctx, name+"/queue").Result()
				return err == nil && n == 2
			})
			c, err := cli.Get(ctx, name+"/seq").Int64()
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := <-waited; err == nil {
				t.Fatal("the waiter was granted while the first holder held")
			}
			return fencing.Token(c)
		},
		Down: r.Stop,
	})
}
