package redisio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestSessionAccessors: a session reports its client, id, key and TTL;
// the TTL is driver.DefaultTTL without WithTTL.
func TestSessionAccessors(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	cli := newClient(t, r)
	s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli))
	if s.Client() != cli {
		t.Errorf("Client() = %p, want %p", s.Client(), cli)
	}
	if s.TTL() != driver.DefaultTTL || redisio.DefaultTTL != driver.DefaultTTL {
		t.Errorf("TTL() = %v, DefaultTTL = %v, want %v", s.TTL(), redisio.DefaultTTL, driver.DefaultTTL)
	}
	if s.LeaseID() <= 0 || s.Key() == "" {
		t.Errorf("LeaseID() = %d, Key() = %q", s.LeaseID(), s.Key())
	}
	if s.Err() != nil {
		t.Errorf("Err() = %v on a live session", s.Err())
	}
}

// TestSuspendAfter: WithSuspendAfter(p) suspends the holders after p of
// the TTL without an acknowledged refresh, so that they hear Suspended
// with most of the TTL left (by default, half of it at most).
func TestSuspendAfter(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	const ttl = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := newClient(t, r)
	s := testkit.ClosedAtEnd[*redisio.Session](t)(redisio.NewSession(cli, redisio.WithTTL(ttl), redisio.WithSuspendAfter(0.2)))
	l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, "suspend-after", redisio.WithSession(s)))
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	testhook.PauseRenewal(s, resume)
	sus := testkit.NextOf[primitives.Suspended](t, events, 10*time.Second)
	if left := time.Until(sus.Deadline); left < ttl/2+ttl/6 {
		t.Errorf("Suspended with %v left of a TTL of %v, want about 80%% of it", left, ttl)
	}
	close(resume)
	testkit.NextOf[primitives.Resumed](t, events, 10*time.Second)
}
