// Command ratelimit tells the story of a worker fleet sharing an upstream
// service that allows at most three calls at a time, with a disco semaphore
// of three permits.
//
//  1. Eight workers, each its own process with its own lease, run four jobs
//     each through semaphore.Do. The upstream counts the calls in flight:
//     never more than three.
//  2. Each permit is a slot with its own fencing scope ("<name>#<slot>").
//     The upstream keeps one guard per scope. W1 holds slot s, then stalls
//     past its lease (simulated by revoking it). W4, which was waiting,
//     takes slot s with a higher token and calls. W1 wakes and calls with
//     its old token: the guard of slot s rejects it.
//
// Run it with
//
//	go run ./examples/semaphore/ratelimit
//
// It starts an embedded etcd member; set ETCD_ENDPOINTS to use a real
// cluster. It exits 0 only if the story ended as promised.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives/semaphore"
)

func main() { story.RunMain("semaphore example", story.HideAddress, run) }

func run(ctx context.Context, out io.Writer, endpoints []string) error {
	_, err := tell(ctx, out, endpoints)
	return err
}

const (
	permits = 3
	workers = 8
	jobs    = 4
	ttl     = 5 * time.Second
)

// outcome is what the story observed, for the test to check.
type outcome struct {
	Calls       int // calls the upstream accepted in step 1
	MostAtOnce  int // the most calls in flight at once in step 1
	W1, W4      semaphore.Grant
	ZombieErr   error // the upstream's answer to W1's late call
	KeysAtClose int64 // keys left under the prefix at the end
}

// upstream is the rate-limited service: it counts calls in flight and
// checks each call's token against the guard of the slot scope it names.
type upstream struct {
	mu       sync.Mutex
	inFlight int
	most     int
	calls    int
	guards   map[string]*guard.Guard
}

func (u *upstream) guard(scope string) *guard.Guard {
	u.mu.Lock()
	defer u.mu.Unlock()
	g := u.guards[scope]
	if g == nil {
		g = guard.New()
		u.guards[scope] = g
	}
	return g
}

// call serves one call made under grant g, taking work to do it.
func (u *upstream) call(ctx context.Context, scope string, t fencing.Token, work time.Duration) error {
	_, done, err := u.guard(scope).Admit(ctx, t)
	if err != nil {
		return err
	}
	defer done()
	u.mu.Lock()
	u.inFlight++
	u.calls++
	u.most = max(u.most, u.inFlight)
	u.mu.Unlock()
	time.Sleep(work) // the upstream's work
	u.mu.Lock()
	u.inFlight--
	u.mu.Unlock()
	return nil
}

func tell(ctx context.Context, out io.Writer, endpoints []string) (o outcome, err error) {
	say, step := story.Narrator(out)
	prefix := story.Prefix("semaphore/ratelimit")
	clients := story.NewClients(endpoints)
	defer clients.Close()
	world, err := clients.New()
	if err != nil {
		return o, err
	}
	fleet := make([]semaphore.Service, workers)
	defer func() {
		for _, s := range fleet {
			if s != nil {
				_ = s.Close() // W1's fails: its lease is gone
			}
		}
		// The story's semaphore is never used again: remove the record of
		// its number of permits, the one key it leaves behind.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if rerr := etcdio.RetireSemaphore(rctx, world, prefix); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for i := range fleet {
		cli, err := clients.New()
		if err != nil {
			return o, err
		}
		if fleet[i], err = etcdio.NewSemaphore(cli, prefix, permits, etcdio.WithTTL(ttl)); err != nil {
			return o, err
		}
	}
	up := &upstream{guards: map[string]*guard.Guard{}}
	say("upstream: allows %d calls at a time; %d workers share a semaphore of %d permits", permits, workers, permits)

	step("1. %d workers run %d jobs each, each job inside semaphore.Do", workers, jobs)
	eg, egCtx := errgroup.WithContext(ctx)
	for _, s := range fleet {
		eg.Go(func() error {
			for range jobs {
				err := semaphore.Do(egCtx, s, func(ctx context.Context, g semaphore.Grant) error {
					return up.call(ctx, g.Scope(), g.Token(), 5*time.Millisecond)
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return o, fmt.Errorf("fleet: %w", err)
	}
	o.Calls, o.MostAtOnce = up.calls, up.most
	if o.MostAtOnce > permits {
		return o, fmt.Errorf("%d calls in flight at once, the limit is %d", o.MostAtOnce, permits)
	}
	say("   %d calls served, at most %d in flight at once", o.Calls, o.MostAtOnce)

	step("2. Each permit is a slot with its own fencing scope")
	w1, w2, w3, w4 := fleet[0], fleet[1], fleet[2], fleet[3]
	w1Events := w1.Subscribe(ctx) // subscribed early, so no Lost is missed
	var held [3]semaphore.Grant
	for i, w := range []semaphore.Service{w1, w2, w3} {
		if held[i], err = w.Acquire(ctx); err != nil {
			return o, fmt.Errorf("W%d: %w", i+1, err)
		}
		say("   W%d holds slot %d (scope %s) with token %d", i+1, held[i].Slot, held[i].Scope(), held[i].Token())
	}
	o.W1 = held[0]
	if err := up.call(ctx, o.W1.Scope(), o.W1.Token(), 0); err != nil {
		return o, fmt.Errorf("W1: call: %w", err)
	}
	say("   W1 calls the upstream with token %d: accepted", o.W1.Token())
	type result struct {
		g   semaphore.Grant
		err error
	}
	w4Got := make(chan result, 1)
	go func() {
		g, err := w4.Acquire(ctx)
		w4Got <- result{g, err}
	}()
	if err := story.WaitForKeys(ctx, world, prefix+"/q", permits+1, "queue keys"); err != nil {
		return o, err
	}
	say("   W4 asks for a permit and waits: all %d are held", permits)
	say("   W1 pauses past its lease's TTL (simulated: another client revokes its lease)")
	if _, err := story.Pause(ctx, world, "W1", o.W1.LeaseID, w1Events); err != nil {
		return o, err
	}
	var r result
	select {
	case r = <-w4Got:
	case <-ctx.Done():
		return o, fmt.Errorf("waiting for W4's permit: %w", ctx.Err())
	}
	if r.err != nil {
		return o, fmt.Errorf("W4: %w", r.err)
	}
	o.W4 = r.g
	if o.W4.Scope() != o.W1.Scope() {
		return o, fmt.Errorf("W4 got slot %d, not the lost W1's %d", o.W4.Slot, o.W1.Slot)
	}
	say("   W4 gets W1's slot %d with token %d, above W1's %d", o.W4.Slot, o.W4.Token(), o.W1.Token())
	if err := up.call(ctx, o.W4.Scope(), o.W4.Token(), 0); err != nil {
		return o, fmt.Errorf("W4: call: %w", err)
	}
	say("   W4 calls with token %d: accepted", o.W4.Token())
	o.ZombieErr = up.call(ctx, o.W1.Scope(), o.W1.Token(), 0)
	switch {
	case o.ZombieErr == nil:
		return o, fmt.Errorf("W1's late call with old token %d was ACCEPTED: the fence failed", o.W1.Token())
	case !errors.Is(o.ZombieErr, fencing.ErrTokenStale):
		return o, fmt.Errorf("W1's late call failed for another reason: %w", o.ZombieErr)
	}
	say("   W1 wakes up, still believing it holds slot %d, and calls: REJECTED", o.W1.Slot)
	say("      %v", o.ZombieErr)
	for i, w := range []semaphore.Service{w2, w3} {
		if err := w.Release(ctx, held[i+1]); err != nil {
			return o, fmt.Errorf("W%d: release: %w", i+2, err)
		}
	}
	if err := w4.Release(ctx, o.W4); err != nil {
		return o, fmt.Errorf("W4: release: %w", err)
	}
	resp, err := world.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return o, err
	}
	o.KeysAtClose = resp.Count
	if o.KeysAtClose != 0 {
		return o, fmt.Errorf("%d keys left under the semaphore after every release", o.KeysAtClose)
	}
	say("   W2, W3 and W4 release: no key is left under the semaphore")

	step("Outcome: never more than %d calls at once, and the stalled worker's", permits)
	say("late call was rejected by its slot's guard. The story ended as promised.")
	return o, nil
}
