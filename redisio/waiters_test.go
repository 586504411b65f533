package redisio_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// scriptCalls is how many scripts the server has run.
func scriptCalls(t *testing.T, cli *redis.Client) int {
	t.Helper()
	info, err := cli.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		f := strings.TrimPrefix(strings.SplitN(line, ":", 2)[1], "calls=")
		c, err := strconv.Atoi(f[:strings.IndexByte(f, ',')])
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		n += c
	}
	return n
}

// TestParkedWaitersDoNotPoll: waiters parked behind a holder cost Redis one
// look each per re-check interval (TTL/4, at most 1 s), plus each session's
// refresh every TTL/3: no polling storm. Then each release hands the lock
// to the next waiter in order.
func TestParkedWaitersDoNotPoll(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const waiters, ttl, park = 8, 4 * time.Second, 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := newClient(t, r)
	holder := lockOn(t, r, "parked", redisio.WithTTL(ttl))
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	type res struct {
		g   lock.Grant
		err error
	}
	got := make(chan res, waiters)
	ls := make([]lock.Service, waiters)
	for i := range ls {
		ls[i] = lockOn(t, r, "parked", redisio.WithTTL(ttl))
		go func() {
			g, err := ls[i].Lock(ctx)
			got <- res{g, err}
		}()
	}
	// Every waiter has queued (the holder heads the queue).
	testkit.Eventually(t, 10*time.Second, "every waiter queued", func() bool {
		n, err := admin.ZCard(ctx, "parked/queue").Result()
		return err == nil && n == waiters+1
	})
	before := scriptCalls(t, admin)
	time.Sleep(park) // the measured quiet spell, not synchronisation
	calls := scriptCalls(t, admin) - before
	recheck := ttl / 4                                   // 1s
	bound := (waiters + 1) * (int(park/recheck) + 1) * 2 // looks and refreshes, generously
	if calls > bound {
		t.Fatalf("%d scripts in %v with %d parked waiters, want at most %d", calls, park, waiters, bound)
	}
	t.Logf("%d scripts in %v with %d parked waiters (bound %d)", calls, park, waiters, bound)

	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var last lock.Grant
	for range waiters {
		o := <-got
		if o.err != nil {
			t.Fatal(o.err)
		}
		if o.g.Created <= last.Created || o.g.Token() <= last.Token() {
			t.Fatalf("grant %+v after %+v: not in order", o.g, last)
		}
		last = o.g
		for _, l := range ls {
			if err := l.Release(ctx, o.g); err == nil {
				break
			}
		}
	}
}
