// Command batch tells the story of a batch job whose workers start and
// finish together.
//
//  1. A coordinator holds a barrier while it prepares the batch's input;
//     the workers wait on it and start once it is released.
//  2. The workers enter a double barrier of five: none begins its share of
//     the batch before all five have entered.
//  3. Each works for a different time, then leaves the double barrier: none
//     returns from Leave before the slowest has finished, so the batch
//     is complete when any worker moves on.
//
// Run it with
//
//	go run ./examples/barrier/batch
//
// It starts an embedded etcd member; set ETCD_ENDPOINTS to use a real
// cluster. It exits 0 only if the story ended as promised.
package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/primitives/barrier"
)

func main() { story.RunMain("barrier example", story.HideAddress, run) }

func run(ctx context.Context, out io.Writer, endpoints []string) error {
	_, err := tell(ctx, out, endpoints)
	return err
}

const (
	workers = 5
	ttl     = 5 * time.Second
)

// outcome is what the story observed, for the test to check. Times are of
// this process's clock, where every worker runs.
type outcome struct {
	InputReady time.Time   // the coordinator released the gate
	Started    []time.Time // each worker's return from Wait
	Entering   []time.Time // each worker's call of Enter
	Entered    []time.Time // each worker's return from Enter
	Finished   []time.Time // each worker's end of work
	Left       []time.Time // each worker's return from Leave
	KeysLeft   int64
}

func tell(ctx context.Context, out io.Writer, endpoints []string) (o outcome, err error) {
	say, step := story.Narrator(out)
	prefix := story.Prefix("barrier/batch")
	clients := story.NewClients(endpoints)
	defer clients.Close()
	coord, err := clients.New()
	if err != nil {
		return o, err
	}
	gate, err := etcdio.NewBarrier(coord, prefix+"/gate")
	if err != nil {
		return o, err
	}
	type worker struct {
		gate barrier.Barrier
		db   barrier.DoubleBarrier
	}
	ws := make([]worker, workers)
	defer func() {
		for _, w := range ws {
			if w.db != nil {
				_ = w.db.Close()
			}
		}
	}()
	for i := range ws {
		cli, err := clients.New()
		if err != nil {
			return o, err
		}
		if ws[i].gate, err = etcdio.NewBarrier(cli, prefix+"/gate"); err != nil {
			return o, err
		}
		if ws[i].db, err = etcdio.NewDoubleBarrier(cli, prefix+"/batch", workers, etcdio.WithTTL(ttl)); err != nil {
			return o, err
		}
	}
	o.Started = make([]time.Time, workers)
	o.Entering = make([]time.Time, workers)
	o.Entered = make([]time.Time, workers)
	o.Finished = make([]time.Time, workers)
	o.Left = make([]time.Time, workers)

	step("1. The coordinator holds the gate while it prepares the input")
	if err := gate.Hold(ctx); err != nil {
		return o, err
	}
	var mu sync.Mutex
	var order []int // workers in the order they entered
	eg, egCtx := errgroup.WithContext(ctx)
	for i, w := range ws {
		eg.Go(func() error {
			if err := w.gate.Wait(egCtx); err != nil {
				return fmt.Errorf("worker %d: wait: %w", i+1, err)
			}
			o.Started[i] = time.Now()
			// Workers trickle in: worker i arrives i*20 ms after the gate.
			time.Sleep(time.Duration(i) * 20 * time.Millisecond)
			o.Entering[i] = time.Now()
			mu.Lock()
			order = append(order, i+1)
			mu.Unlock()
			if err := w.db.Enter(egCtx); err != nil {
				return fmt.Errorf("worker %d: enter: %w", i+1, err)
			}
			o.Entered[i] = time.Now()
			// Each worker's share of the batch takes a different time.
			time.Sleep(time.Duration(workers-i) * 20 * time.Millisecond)
			o.Finished[i] = time.Now()
			if err := w.db.Leave(egCtx); err != nil {
				return fmt.Errorf("worker %d: leave: %w", i+1, err)
			}
			o.Left[i] = time.Now()
			return nil
		})
	}
	say("   %d workers wait at the gate", workers)
	o.InputReady = time.Now()
	if err := gate.Release(ctx); err != nil {
		return o, err
	}
	say("   the input is ready: the coordinator releases the gate")
	if err := eg.Wait(); err != nil {
		return o, err
	}

	step("2. The workers arrive one by one and enter the double barrier of %d", workers)
	lastIn, firstOut := slices.MaxFunc(o.Entering, cmpTime), slices.MinFunc(o.Entered, cmpTime)
	if firstOut.Before(lastIn) {
		return o, fmt.Errorf("a worker started its share before the last one entered")
	}
	say("   arrival order %v; the first began work %v after the last arrived: nobody started early",
		order, firstOut.Sub(lastIn).Round(time.Millisecond))

	step("3. Each works for a different time, then leaves")
	lastDone, firstLeft := slices.MaxFunc(o.Finished, cmpTime), slices.MinFunc(o.Left, cmpTime)
	if firstLeft.Before(lastDone) {
		return o, fmt.Errorf("a worker left before the slowest finished")
	}
	say("   the first left %v after the slowest finished: nobody moved on early",
		firstLeft.Sub(lastDone).Round(time.Millisecond))
	resp, err := coord.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return o, err
	}
	if o.KeysLeft = resp.Count; o.KeysLeft != 0 {
		return o, fmt.Errorf("%d keys left under the job's prefix", o.KeysLeft)
	}
	say("   the last to leave cleared the double barrier: no key is left")

	step("Outcome: the workers started together and finished together.")
	say("The story ended as promised.")
	return o, nil
}

func cmpTime(a, b time.Time) int { return a.Compare(b) }
