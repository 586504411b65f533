package redisio_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/redisio"
)

// countScripts is a go-redis hook that counts the scripts its match
// accepts as they are sent.
type countScripts struct {
	match func(args []any) bool
	n     atomic.Int64
}

func (c *countScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *countScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c *countScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.match(cmd.Args()) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestCloseStopsEnqueueRepeatsInOutage: Close of a lock on a shared
// session, while Redis does not answer and an acquisition repeats its
// enqueue, ends that acquisition's repeats: Lock returns ErrClosed and
// Close returns without waiting out its bound on the acquisition (10 s),
// and no enqueue is sent once Close has returned. The repeats went on
// until the caller's context or the session ended, so Close waited its
// whole bound and the acquisition went on sending enqueues for a closed
// lock, one of which would queue a hold when Redis answered again.
func TestCloseStopsEnqueueRepeatsInOutage(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const name = "close/outage"
	px, cli := proxied(t, r, redis.Options{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	// The enqueues, and the lookups of the hold a repeated enqueue's lost
	// attempt may have queued.
	enqueues := &countScripts{match: func(a []any) bool { return isScript(a, 4, -1, name+"/seq") }}
	lookups := &countScripts{match: func(a []any) bool { return isScript(a, 2, 1, name+"/queue") }}
	cli.AddHook(enqueues)
	cli.AddHook(lookups)
	// A TTL long enough that the session outlives the test's outage.
	s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli, redisio.WithTTL(time.Minute)))
	l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	px.BlackholeTx()
	px.BlackholeRx()
	defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	locked := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); locked <- err }()
	testkit.Eventually(t, 10*time.Second, "the enqueue repeated", func() bool { return lookups.n.Load() >= 1 })
	start := time.Now()
	_ = l.Close()
	took := time.Since(start)
	sent := enqueues.n.Load()
	select {
	case err := <-locked:
		if !errors.Is(err, primitives.ErrClosed) {
			t.Errorf("Lock: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("Lock did not return within 5s after Close (which took %v)", took)
	}
	if took > 5*time.Second {
		t.Errorf("Close took %v while Redis did not answer: it waited for an acquisition that kept repeating its enqueue", took)
	}
	if n := enqueues.n.Load(); n != sent {
		t.Errorf("%d enqueues sent after Close returned", n-sent)
	}
}
