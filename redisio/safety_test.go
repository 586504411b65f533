package redisio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// lockOn returns a lock on its own client and session, closed when t ends.
func lockOn(t *testing.T, r *testserver.Redis, name string, opts ...redisio.Option) lock.Service {
	t.Helper()
	l, err := redisio.NewLock(newClient(t, r), name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// grants locks and unlocks l n times and returns the grants.
func grants(t *testing.T, l lock.Service, n int) []lock.Grant {
	t.Helper()
	ctx := context.Background()
	var gs []lock.Grant
	for range n {
		g, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return gs
}

// TestTokensRiseAcrossRestartWithAOF: with appendfsync always, a counter
// increment is on disk before the grant that carries it is returned, so a
// server restarted between grants goes on from where it was: the guard
// that admitted the tokens before the restart admits the ones after.
func TestTokensRiseAcrossRestartWithAOF(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	gd := guard.New()
	before := grants(t, lockOn(t, r, "aof"), 3)
	for _, g := range before {
		if err := gd.Check(g.Token()); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	after := grants(t, lockOn(t, r, "aof"), 3)
	prev := before[len(before)-1].Token()
	for _, g := range after {
		if g.Token() <= prev {
			t.Fatalf("token %d after %d across a restart with AOF", g.Token(), prev)
		}
		if err := gd.Check(g.Token()); err != nil {
			t.Fatalf("guard rejected token %d issued after the restart: %v", g.Token(), err)
		}
		prev = g.Token()
	}
}

// TestTokensGoBackWithoutAOF documents what the safety contract excludes:
// a server that forgets its counter (no AOF, as after an asynchronous
// failover to a replica that had not seen the latest increments) hands out
// tokens again. A guard then rejects the new holder as stale (it fails
// safe for the resource, but stops the new holder's work), and two holders
// may show the same token, which a guard treats as equal.
func TestTokensGoBackWithoutAOF(t *testing.T) {
	r := testserver.StartRedis(t, testserver.WithoutAOF())
	testkit.NoLeaks(t)
	gd := guard.New()
	before := grants(t, lockOn(t, r, "volatile"), 3)
	last := before[len(before)-1].Token()
	if err := gd.Check(last); err != nil {
		t.Fatal(err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	after := grants(t, lockOn(t, r, "volatile"), 1)[0]
	if after.Token() > last {
		t.Fatalf("token %d after %d: the counter survived a restart without persistence", after.Token(), last)
	}
	if err := gd.Check(after.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("guard given a token issued again after the restart: %v, want ErrTokenStale", err)
	}
}

// TestPausedHolderIsFencedByGuard: a holder frozen past its TTL (a long GC
// pause) loses the lock to a successor with a higher token; the guard in
// front of the resource admits the successor and rejects the paused
// holder's late write, and the holder sees Lost when it wakes.
func TestPausedHolderIsFencedByGuard(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli, redisio.WithTTL(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	holder, err := redisio.NewLock(cli, "paused", redisio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	successor := lockOn(t, r, "paused", redisio.WithTTL(500*time.Millisecond))
	gd := guard.New()

	events := holder.Subscribe(ctx)
	gh, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, done, err := gd.Admit(ctx, gh.Token()); err != nil {
		t.Fatal(err)
	} else {
		done()
	}
	resume := make(chan struct{})
	testhook.PauseSession(s, resume)
	gs, err := successor.Lock(ctx) // returns once the holder's key expired
	if err != nil {
		t.Fatal(err)
	}
	if gs.Token() <= gh.Token() {
		t.Fatalf("successor's token %d not above the paused holder's %d", gs.Token(), gh.Token())
	}
	if _, done, err := gd.Admit(ctx, gs.Token()); err != nil {
		t.Fatal(err)
	} else {
		done()
	}
	close(resume)
	if _, _, err := gd.Admit(ctx, gh.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("guard admitted the paused holder's late write: %v", err)
	}
	for e := range events {
		if lost, ok := e.(primitives.Lost); ok {
			if lost.Created != gh.Created || !errors.Is(lost.Err, primitives.ErrLost) {
				t.Fatalf("Lost %+v for grant %+v", lost, gh)
			}
			break
		}
	}
	<-holder.Done()
	if !errors.Is(holder.Err(), primitives.ErrLost) {
		t.Fatalf("paused holder's Err = %v, want ErrLost", holder.Err())
	}
	if err := successor.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRestartWhileWaiting: with AOF, a holder and a waiter ride out a
// server restart (their session keys and the queue come back from the
// append-only file, the pub/sub connection resubscribes), and the waiter
// takes over with a higher token once the holder unlocks.
func TestRestartWhileWaiting(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder := lockOn(t, r, "restart-wait", redisio.WithTTL(3*time.Second))
	waiter := lockOn(t, r, "restart-wait", redisio.WithTTL(3*time.Second))
	gh, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		g   lock.Grant
		err error
	}
	got := make(chan res, 1)
	go func() {
		g, err := waiter.Lock(ctx)
		got <- res{g, err}
	}()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-got:
		t.Fatalf("waiter acquired while the holder holds: %+v, %v", o.g, o.err)
	default:
	}
	var uerr error
	for range 50 { // the client may need a few tries to reconnect
		if uerr = holder.Unlock(ctx); uerr == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // retry interval, not synchronisation
	}
	if uerr != nil {
		t.Fatalf("Unlock after the restart: %v", uerr)
	}
	o := <-got
	if o.err != nil {
		t.Fatalf("waiter's Lock across the restart: %v", o.err)
	}
	if o.g.Token() <= gh.Token() {
		t.Fatalf("waiter's token %d not above the holder's %d", o.g.Token(), gh.Token())
	}
	if err := holder.Err(); err != nil {
		t.Fatalf("holder's session did not survive the restart: %v", err)
	}
}
