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
	"github.com/ahrtr/disco/primitives/barrier"
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
	times int // replies still to lose
	lost  int
}

// arm makes the next call of sc lose its reply.
func (l *replyLoser) arm(sc *redis.Script) { l.armBytes(sc.Hash(), 1) }

// armBytes makes the next n commands whose bytes contain b lose their
// replies.
func (l *replyLoser) armBytes(b string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed, l.times = []byte(b), n
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
	if c.l.times > 0 && bytes.Contains(b, c.l.armed) {
		c.l.times--
		c.muted = true
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

// lossyRedis starts a Redis server for t with scripts loaded (so that a
// call whose reply is lost runs its script) and returns a context that
// ends with t, a client that hears every reply, and one whose replies
// loser loses when armed (its reads time out after 250ms).
func lossyRedis(t *testing.T, scripts ...*redis.Script) (context.Context, *redis.Client, *redis.Client, *replyLoser) {
	t.Helper()
	r := testserver.StartRedis(t)
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	for _, sc := range scripts {
		if err := sc.Load(ctx, admin).Err(); err != nil {
			t.Fatal(err)
		}
	}
	loser := new(replyLoser)
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 250 * time.Millisecond, Dialer: loser.dial})
	t.Cleanup(func() { cli.Close() })
	return ctx, admin, cli, loser
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
	ctx, admin, cli, loser := lossyRedis(t, enqueueScript, semEnqueueScript, rwEnqueueScript, releaseScript)
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
	t.Run("lock, waiting", func(t *testing.T) {
		// The hold the lost reply's script queued waits behind another:
		// the repeat keeps it, and it is granted at its turn.
		other := testkit.ClosedAtEnd[lock.Service](t)(NewLock(admin, "lost/wait", WithTTL(10*time.Second)))
		og, err := other.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := scriptDone{findScript.Hash(), make(chan struct{}, 1)}
		cli.AddHook(found)
		l := testkit.ClosedAtEnd[lock.Service](t)(NewLock(cli, "lost/wait", WithTTL(10*time.Second)))
		loser.arm(enqueueScript)
		before := loser.losses()
		got := make(chan error, 1)
		var g lock.Grant
		go func() {
			var err error
			g, err = l.Lock(ctx)
			got <- err
		}()
		select {
		case <-found.done: // the repeat found the queued hold, which waits
		case err := <-got:
			t.Fatalf("Lock returned (%v) while another held", err)
		case <-ctx.Done():
			t.Fatal("the lost enqueue was never looked up")
		}
		if loser.losses() != before+1 {
			t.Fatal("no reply lost")
		}
		if err := other.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("Lock whose reply was lost, queued behind another: %v", err)
		}
		if g.FencingToken <= og.FencingToken {
			t.Fatalf("token %d, not above the previous holder's %d", g.FencingToken, og.FencingToken)
		}
		checkQueue(t, ctx, admin, "lost/wait/queue", 1)
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		checkQueue(t, ctx, admin, "lost/wait/queue", 0)
	})
	t.Run("lock, given up", func(t *testing.T) {
		// The enqueue's reply is lost and so are those of the lookups of
		// its hold until the caller gives up: the hold, granted in Redis
		// to nobody, is withdrawn once Redis answers again, not left to
		// block the name until it expires (a TTL, then its tombstone's).
		l := testkit.ClosedAtEnd[lock.Service](t)(NewLock(cli, "lost/gaveup", WithTTL(10*time.Second)))
		before := loser.losses()
		loser.arm(enqueueScript)
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		healed := make(chan struct{})
		defer func() { <-healed }() // before the next case arms the loser
		go func() {
			defer close(healed)
			// Then every lookup's, until well after the caller gave up:
			// past go-redis's resends of the lookup that withdraws (the
			// fault's length, not a wait for something to happen).
			for loser.losses() == before && lctx.Err() == nil {
				time.Sleep(time.Millisecond) // polling, bounded by lctx
			}
			loser.armBytes(findScript.Hash(), 1000)
			<-lctx.Done()
			time.Sleep(2 * time.Second)
			loser.armBytes("", 0)
		}()
		if _, err := l.Lock(lctx); err == nil {
			t.Fatal("Lock succeeded with every lookup's reply lost")
		}
		other := testkit.ClosedAtEnd[lock.Service](t)(NewLock(admin, "lost/gaveup", WithTTL(10*time.Second)))
		tctx, tcancel := context.WithTimeout(ctx, 6*time.Second)
		defer tcancel()
		if _, err := other.Lock(tctx); err != nil {
			t.Fatalf("the name is still blocked by the abandoned hold: %v", err)
		}
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

// scriptDone is a client hook that reports each call of its script that
// was answered, after go-redis's own resends, on its channel.
type scriptDone struct {
	hash string
	done chan struct{}
}

func (scriptDone) DialHook(next redis.DialHook) redis.DialHook { return next }

func (scriptDone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h scriptDone) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); err == nil && len(args) > 1 && args[1] == h.hash {
			select {
			case h.done <- struct{}{}:
			default:
			}
		}
		return err
	}
}

// TestLostRepliesBarriers: a barrier's Hold, Release and a double
// barrier's Enter whose replies were lost (after Redis ran them) answer as
// their first run did, whether go-redis sent them again or redisio did. A
// second run of Enter counted its party twice and filled a round of three
// with two parties; a second SETNX of Hold answered ErrHeld and left the
// barrier up with nobody to release it; a second Release answered
// ErrNotHeld.
func TestLostRepliesBarriers(t *testing.T) {
	t.Parallel()
	ctx, admin, cli, loser := lossyRedis(t, dbEnterScript, barrierHoldScript, barrierReleaseScript)

	t.Run("double barrier enter", func(t *testing.T) {
		entered := scriptDone{dbEnterScript.Hash(), make(chan struct{}, 4)}
		cli.AddHook(entered)
		const name = "lost/dbarrier"
		parties := make([]barrier.DoubleBarrier, 3)
		for i := range parties {
			c := admin
			if i == 1 {
				c = cli // the party whose Enter's reply is lost
			}
			parties[i] = testkit.ClosedAtEnd[barrier.DoubleBarrier](t)(NewDoubleBarrier(c, name, 3, WithTTL(10*time.Second)))
		}
		enter := func(d barrier.DoubleBarrier) chan error {
			ch := make(chan error, 1)
			go func() { ch <- d.Enter(ctx) }()
			return ch
		}
		first := enter(parties[0])
		loser.arm(dbEnterScript)
		second := enter(parties[1])
		select {
		case <-entered.done: // its Enter was answered: go-redis's resend ran
		case err := <-second:
			t.Fatalf("Enter of the second of three parties returned %v", err)
		case <-ctx.Done():
			t.Fatal("the second party's Enter was never answered")
		}
		if loser.losses() != 1 {
			t.Fatal("no reply lost")
		}
		if n, err := admin.ZCard(ctx, name+"/dbarrier.parties").Result(); err != nil || n != 2 {
			t.Fatalf("%d parties in the round (%v), want 2", n, err)
		}
		if full, err := admin.HGet(ctx, name+"/dbarrier", "r").Result(); err != redis.Nil {
			t.Fatalf("round full (%q, %v) with two parties of three in", full, err)
		}
		third := enter(parties[2])
		for _, ch := range []chan error{first, second, third} {
			if err := <-ch; err != nil {
				t.Fatalf("Enter: %v", err)
			}
		}
		for _, d := range parties {
			go func() { _ = d.Leave(ctx) }()
		}
	})

	t.Run("barrier", func(t *testing.T) {
		b, err := NewBarrier(cli, "lost/barrier")
		if err != nil {
			t.Fatal(err)
		}
		loser.armBytes("lost/barrier/barrier", 1) // Hold's one command
		if err := b.Hold(ctx); err != nil {
			t.Fatalf("Hold with its reply lost: %v", err)
		}
		loser.arm(barrierReleaseScript)
		if err := b.Release(ctx); err != nil {
			t.Fatalf("Release with its reply lost: %v", err)
		}
		if n, err := admin.Exists(ctx, "lost/barrier/barrier").Result(); err != nil || n != 0 {
			t.Fatalf("barrier key left (%d, %v)", n, err)
		}
	})
}
