// Command basic tells the story of a read/write lock with fencing tokens.
//
//  1. Three readers hold the read lock at the same time, and they share ONE
//     fencing token.
//  2. A writer waits for those readers; a reader that arrives after the
//     writer waits for the writer (writers do not starve).
//  3. Writer W1 writes to a guarded resource, then stalls long enough to lose
//     its lease (simulated by revoking it from another client). Writer W2
//     takes over and writes. W1 wakes up and writes with its old token: the
//     guard rejects it with fencing.ErrTokenStale.
//  4. Readers come back, share a new token, and the guard accepts their reads.
//
// Run it with
//
//	go run ./examples/rwlock/basic
//
// It starts an embedded etcd member; set ETCD_ENDPOINTS to use a real
// cluster. It exits 0 only if the story ended as promised.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives/rwlock"
)

func main() { story.RunMain("rwlock example", story.HideAddress, run) }

// run tells the story against the etcd cluster at endpoints and returns an
// error unless it ended as promised.
func run(ctx context.Context, out io.Writer, endpoints []string) error {
	_, err := tell(ctx, out, endpoints)
	return err
}

// ttl is every owner's lease time to live: short, since it bounds how long a
// crashed owner would block the others.
const ttl = 5 * time.Second

// outcome is what the story observed, for the test to check.
type outcome struct {
	ReaderTokens []fencing.Token // step 1: three readers holding at once
	W1Token      fencing.Token   // step 3: W1's grant when it became a zombie
	W2Token      fencing.Token
	ZombieErr    error           // the guard's answer to W1's late write
	FinalTokens  []fencing.Token // step 4: readers holding at once again
	FinalValue   string          // what the final readers read
}

// actor is one party of the story. Each stands for a separate process, so
// each has its own etcd client and its own lease.
type actor struct {
	name string
	rw   rwlock.Service
}

func tell(ctx context.Context, out io.Writer, endpoints []string) (o outcome, err error) {
	say, step := story.Narrator(out)
	prefix := story.Prefix("rwlock/basic")

	clients := story.NewClients(endpoints)
	defer clients.Close()
	var actors []*actor
	defer func() {
		for _, a := range actors {
			_ = a.rw.Close() // W1's fails: its lease is gone
		}
		// The story's lock is never used again: remove its epoch key, the
		// one key an rwlock leaves behind.
		if cli, cerr := clients.New(); cerr == nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if rerr := etcdio.RetireRWLock(rctx, cli, prefix); rerr != nil && err == nil {
				err = rerr
			}
		}
	}()
	newActor := func(name string) (*actor, error) {
		cli, err := clients.New()
		if err != nil {
			return nil, err
		}
		rw, err := etcdio.NewRWLock(cli, prefix, etcdio.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		a := &actor{name: name, rw: rw}
		actors = append(actors, a)
		return a, nil
	}
	var r1, r2, r3, r4, w1, w2 *actor
	for _, p := range []struct {
		a    **actor
		name string
	}{{&r1, "R1"}, {&r2, "R2"}, {&r3, "R3"}, {&r4, "R4"}, {&w1, "W1"}, {&w2, "W2"}} {
		if *p.a, err = newActor(p.name); err != nil {
			return o, err
		}
	}
	readers := []*actor{r1, r2, r3}
	// world plays everything around the actors: it looks at etcd's keys and
	// revokes W1's lease.
	world, err := clients.New()
	if err != nil {
		return o, err
	}
	queued := func(n int64) error {
		return story.WaitForKeys(ctx, world, prefix, n, "keys under the lock's prefix")
	}

	res := story.NewResource("v0")
	say("resource: an in-memory value %q behind a fencing guard", "v0")

	// 1. Readers share.
	step("1. R1, R2 and R3 take the read lock at the same time")
	grants := make([]rwlock.Grant, len(readers))
	eg, egCtx := errgroup.WithContext(ctx)
	for i, r := range readers {
		eg.Go(func() (err error) {
			grants[i], err = r.rw.RLock(egCtx)
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return o, fmt.Errorf("readers: %w", err)
	}
	for _, g := range grants {
		o.ReaderTokens = append(o.ReaderTokens, g.Token())
	}
	shared := grants[0].Token()
	if !allEqual(o.ReaderTokens) {
		return o, fmt.Errorf("readers holding at once got different tokens %v", o.ReaderTokens)
	}
	say("   all three hold it now, with ONE shared token %d", shared)
	for _, r := range readers {
		v, err := res.Read(ctx, shared)
		if err != nil {
			return o, fmt.Errorf("%s: read: %w", r.name, err)
		}
		say("   %s reads %q with token %d: accepted", r.name, v, shared)
	}

	// 2. A writer excludes.
	step("2. Writer W1 asks for the write lock")
	w1Events := w1.rw.Subscribe(ctx) // subscribed early, so no Lost is missed
	w1Grant := acquireAsync(ctx, w1.rw.Lock)
	if err := queued(4); err != nil {
		return o, err
	}
	say("   W1 waits: its key is in etcd, behind the three readers")
	r4Grant := acquireAsync(ctx, r4.rw.RLock)
	if err := queued(5); err != nil {
		return o, err
	}
	say("   R4 asks for a read lock after W1: it waits for W1 (writers do not starve)")
	for _, r := range readers {
		if err := r.rw.RUnlock(ctx); err != nil {
			return o, fmt.Errorf("%s: runlock: %w", r.name, err)
		}
	}
	say("   R1, R2 and R3 release their read locks")
	gw1, err := recv(ctx, w1Grant, "W1's write lock")
	if err != nil {
		return o, err
	}
	if gw1.Token() <= shared {
		return o, fmt.Errorf("W1's token %d is not above the readers' %d", gw1.Token(), shared)
	}
	select {
	case <-r4Grant:
		return o, errors.New("R4 got a read lock while W1 holds the write lock")
	default:
	}
	say("   W1 holds the write lock: token %d, above the readers' %d; R4 still waits", gw1.Token(), shared)
	if err := res.Write(ctx, gw1.Token(), "v1 by W1"); err != nil {
		return o, fmt.Errorf("W1: write: %w", err)
	}
	say("   W1 writes %q with token %d: accepted", "v1 by W1", gw1.Token())
	if err := w1.rw.Unlock(ctx); err != nil {
		return o, fmt.Errorf("W1: unlock: %w", err)
	}
	gr4, err := recv(ctx, r4Grant, "R4's read lock")
	if err != nil {
		return o, err
	}
	v, err := res.Read(ctx, gr4.Token())
	if err != nil {
		return o, fmt.Errorf("R4: read: %w", err)
	}
	say("   W1 releases; R4 gets its read lock (token %d) and reads %q", gr4.Token(), v)
	if err := r4.rw.RUnlock(ctx); err != nil {
		return o, fmt.Errorf("R4: runlock: %w", err)
	}

	// 3. The zombie writer.
	step("3. W1 writes again, then stalls")
	gw1, err = w1.rw.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("W1: lock: %w", err)
	}
	o.W1Token = gw1.Token()
	if err := res.Write(ctx, gw1.Token(), "v2 by W1"); err != nil {
		return o, fmt.Errorf("W1: write: %w", err)
	}
	say("   W1 takes the write lock again (a fresh grant, token %d) and writes %q: accepted", gw1.Token(), "v2 by W1")
	w2Grant := acquireAsync(ctx, w2.rw.Lock)
	if err := queued(2); err != nil {
		return o, err
	}
	say("   W2 asks for the write lock and waits behind W1")
	say("   W1 pauses (say, a long GC pause) past its lease's TTL")
	say("   (simulated: another client revokes W1's lease instead of waiting %v)", gw1.TTL)
	lost, err := story.Pause(ctx, world, "W1", gw1.LeaseID, w1Events)
	if err != nil {
		return o, err
	}
	say("   W1's Subscribe reports Lost for token %d; a paused process would not notice", lost.Token)
	gw2, err := recv(ctx, w2Grant, "W2's write lock")
	if err != nil {
		return o, err
	}
	o.W2Token = gw2.Token()
	if err := res.Write(ctx, gw2.Token(), "v3 by W2"); err != nil {
		return o, fmt.Errorf("W2: write: %w", err)
	}
	say("   W2 holds the write lock: token %d; it writes %q: accepted", gw2.Token(), "v3 by W2")
	o.ZombieErr = res.Write(ctx, gw1.Token(), "late write by W1")
	switch {
	case o.ZombieErr == nil:
		return o, fmt.Errorf("W1's late write with old token %d was ACCEPTED: the fence failed", gw1.Token())
	case !errors.Is(o.ZombieErr, fencing.ErrTokenStale):
		return o, fmt.Errorf("W1's late write failed for another reason: %w", o.ZombieErr)
	}
	say("   W1 wakes up, still believing it holds token %d, and writes: REJECTED", gw1.Token())
	say("      %v", o.ZombieErr)
	if err := w2.rw.Unlock(ctx); err != nil {
		return o, fmt.Errorf("W2: unlock: %w", err)
	}
	say("   W2 releases the write lock")

	// 4. Readers come back. Each holds its read lock through rwlock.DoRead
	// and waits inside it until all three are in: so they hold at once.
	step("4. R1, R2 and R3 read again, together, with rwlock.DoRead")
	o.FinalTokens = make([]fencing.Token, len(readers))
	values := make([]string, len(readers))
	arrived, allIn := make(chan struct{}, len(readers)), make(chan struct{})
	eg, egCtx = errgroup.WithContext(ctx)
	for i, r := range readers {
		eg.Go(func() error {
			return rwlock.DoRead(egCtx, r.rw, func(ctx context.Context, g rwlock.Grant) error {
				o.FinalTokens[i] = g.Token()
				arrived <- struct{}{}
				select {
				case <-allIn:
				case <-ctx.Done():
					return ctx.Err()
				}
				var err error
				values[i], err = res.Read(ctx, g.Token())
				return err
			})
		})
	}
	for range readers {
		select {
		case <-arrived:
		case <-egCtx.Done():
		}
	}
	close(allIn)
	if err := eg.Wait(); err != nil {
		return o, fmt.Errorf("final readers: %w", err)
	}
	if !allEqual(o.FinalTokens) || o.FinalTokens[0] <= gw2.Token() {
		return o, fmt.Errorf("final readers got tokens %v after W2's %d; want one shared token above it", o.FinalTokens, gw2.Token())
	}
	say("   all three hold it at once, sharing token %d (above W2's %d)", o.FinalTokens[0], gw2.Token())
	o.FinalValue = values[0]
	for i, r := range readers {
		if values[i] != "v3 by W2" {
			return o, fmt.Errorf("%s read %q, want W2's value", r.name, values[i])
		}
		say("   %s reads %q with token %d: accepted", r.name, values[i], o.FinalTokens[i])
	}
	staleRead := errors.Is(res.Guard.Check(shared), fencing.ErrTokenStale)
	if !staleRead {
		return o, fmt.Errorf("the readers' old token %d is still accepted", shared)
	}
	say("   the readers' old token %d from step 1 would now be rejected: %v", shared, staleRead)

	step("Outcome: readers shared their tokens, the writer excluded them, and the")
	say("zombie's late write was rejected. The story ended as promised.")
	return o, nil
}

func allEqual(ts []fencing.Token) bool {
	for _, t := range ts {
		if t != ts[0] {
			return false
		}
	}
	return len(ts) > 0
}

type grantResult struct {
	g   rwlock.Grant
	err error
}

// acquireAsync calls acquire in the background; its result arrives on the
// returned channel.
func acquireAsync(ctx context.Context, acquire func(context.Context) (rwlock.Grant, error)) <-chan grantResult {
	ch := make(chan grantResult, 1)
	go func() {
		g, err := acquire(ctx)
		ch <- grantResult{g, err}
	}()
	return ch
}

func recv(ctx context.Context, ch <-chan grantResult, what string) (rwlock.Grant, error) {
	select {
	case r := <-ch:
		if r.err != nil {
			return rwlock.Grant{}, fmt.Errorf("%s: %w", what, r.err)
		}
		return r.g, nil
	case <-ctx.Done():
		return rwlock.Grant{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}
