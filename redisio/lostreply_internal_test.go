package redisio

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// replyLoser loses the reply to one script call: armed with a script's
// hash, the next connection that sends that script reads nothing more, so
// the call's read times out after Redis ran the script; other connections
// go on as usual.
type replyLoser struct {
	mu    sync.Mutex
	armed []byte
	lost  int
}

// arm makes the next call of sc lose its reply.
func (l *replyLoser) arm(sc *redis.Script) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = []byte(sc.Hash())
}

// losses returns how many replies were lost.
func (l *replyLoser) losses() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// dial is a redis.Options Dialer whose connections l may mute.
func (l *replyLoser) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &losingConn{Conn: c, l: l}, nil
}

type losingConn struct {
	net.Conn
	l     *replyLoser
	muted bool // written and read by the one goroutine go-redis lends the connection to
}

func (c *losingConn) Write(b []byte) (int, error) {
	c.l.mu.Lock()
	if c.l.armed != nil && bytes.Contains(b, c.l.armed) {
		c.l.armed, c.muted = nil, true
		c.l.lost++
	}
	c.l.mu.Unlock()
	return c.Conn.Write(b)
}

// Read discards what a muted connection receives until its read deadline.
func (c *losingConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.muted || err != nil {
			return n, err
		}
	}
}

// TestLostReplies: an enqueue or a release whose reply was lost (the
// client's read timed out after Redis ran the script) is neither sent again
// blindly, as go-redis would on another connection, nor given up: Lock,
// RLock, Campaign and Acquire keep the one hold their script queued, the
// releases report the release their script made, and no hold is left in
// Redis. With
// go-redis's resend, Lock's second script queued a second hold behind the
// first (granted to nobody) and Unlock's found its hold gone and reported
// it lost; without a repeat, both failed.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	r := testserver.StartRedis(t)
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, sc := range []*redis.Script{enqueueScript, semEnqueueScript, rwEnqueueScript, releaseScript} {
		if err := sc.Load(ctx, admin).Err(); err != nil { // so that the call whose reply is lost runs it
			t.Fatal(err)
		}
	}
	var loser replyLoser
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 250 * time.Millisecond, Dialer: loser.dial})
	t.Cleanup(func() { cli.Close() })
	// lost runs f with the next call of sc losing its reply.
	lost := func(t *testing.T, what string, sc *redis.Script, f func() error) {
		t.Helper()
		before := loser.losses()
		loser.arm(sc)
		if err := f(); err != nil {
			t.Fatalf("%s with its reply lost: %v", what, err)
		}
		if loser.losses() != before+1 {
			t.Fatalf("%s lost no reply", what)
		}
	}
	// counted fails t unless the scope's counter is at want: its enqueue
	// script ran once.
	counted := func(t *testing.T, scope string, want int) {
		t.Helper()
		if n, err := admin.Get(ctx, scope+"/seq").Int(); err != nil || n != want {
			t.Fatalf("%s's counter at %d (%v), want %d: its enqueue script ran more than once", scope, n, err, want)
		}
	}
	t.Run("lock", func(t *testing.T) {
		l := testkit.ClosedAtEnd[lock.Service](t)(NewLock(cli, "lost/lock", WithTTL(10*time.Second)))
		lost(t, "Lock", enqueueScript, func() error { _, err := l.Lock(ctx); return err })
		counted(t, "lost/lock", 1)
		checkQueue(t, ctx, admin, "lost/lock/queue", 1)
		lost(t, "Unlock", releaseScript, func() error { return l.Unlock(ctx) })
		checkQueue(t, ctx, admin, "lost/lock/queue", 0)
	})
	t.Run("rwlock", func(t *testing.T) {
		l := testkit.ClosedAtEnd[rwlock.Service](t)(NewRWLock(cli, "lost/rw", WithTTL(10*time.Second)))
		lost(t, "RLock", rwEnqueueScript, func() error { _, err := l.RLock(ctx); return err })
		checkQueue(t, ctx, admin, "lost/rw/queue", 1)
		lost(t, "RUnlock", releaseScript, func() error { return l.RUnlock(ctx) })
		checkQueue(t, ctx, admin, "lost/rw/queue", 0)
	})
	t.Run("election", func(t *testing.T) {
		e := testkit.ClosedAtEnd[election.Service](t)(NewElection(cli, "lost/election", WithTTL(10*time.Second)))
		lost(t, "Campaign", enqueueScript, func() error { return e.Campaign(ctx, "v") })
		counted(t, "lost/election", 1)
		checkQueue(t, ctx, admin, "lost/election/queue", 1)
		lost(t, "Resign", releaseScript, func() error { return e.Resign(ctx) })
		checkQueue(t, ctx, admin, "lost/election/queue", 0)
	})
	t.Run("semaphore", func(t *testing.T) {
		s := testkit.ClosedAtEnd[semaphore.Service](t)(NewSemaphore(cli, "lost/sem", 2, WithTTL(10*time.Second)))
		var g semaphore.Grant
		lost(t, "Acquire", semEnqueueScript, func() (err error) { g, err = s.Acquire(ctx); return err })
		counted(t, "lost/sem", 2)
		checkQueue(t, ctx, admin, "lost/sem/queue", 1)
		lost(t, "Release", releaseScript, func() error { return s.Release(ctx, g) })
		checkQueue(t, ctx, admin, "lost/sem/queue", 0)
	})
}

// checkQueue fails t unless queue holds want holds, each with its key.
func checkQueue(t *testing.T, ctx context.Context, admin *redis.Client, queue string, want int) {
	t.Helper()
	keys, err := admin.ZRange(ctx, queue, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != want {
		t.Fatalf("%s holds %q, want %d holds", queue, keys, want)
	}
	for _, k := range keys {
		if n, err := admin.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("hold %s queued without its key (%v)", k, err)
		}
	}
}
