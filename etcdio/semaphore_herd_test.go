package etcdio_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// countingClient returns a client of the test server that adds the watch
// events it receives to events, closed when t ends.
func countingClient(t *testing.T, events *atomic.Int64) *clientv3.Client {
	t.Helper()
	count := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return eventCounter{cs, events}, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdtest.Endpoints(), DialTimeout: embedded.ClientDialTimeout,
		Logger: zap.NewNop(), DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(count)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// eventCounter counts the events of the watch responses its stream
// receives.
type eventCounter struct {
	grpc.ClientStream
	events *atomic.Int64
}

func (c eventCounter) RecvMsg(m any) error {
	err := c.ClientStream.RecvMsg(m)
	if wr, ok := m.(*pb.WatchResponse); err == nil && ok {
		c.events.Add(int64(len(wr.Events)))
	}
	return err
}

// A release wakes only the waiter it admits (issue 25): with many owners
// queued on few permits, the watch events all owners receive per
// acquisition stay a small constant, not one per waiter.
func TestSemaphoreNoHerd(t *testing.T) {
	testkit.NoLeaks(t)
	const n, owners, warm, total = 2, 16, 40, 200
	// The design needs 3 (see semService); a holder's watch whose end
	// reaches etcd after its release's delete sees it too, one or two more,
	// often so on the test server, which runs without fsync.
	const most = 5.0
	prefix := semPrefix(t)
	var events, acquired atomic.Int64
	var from, to atomic.Int64 // events at the warm-th and the total-th acquisition
	ctx, stop := context.WithCancel(testCtx(t, 60*time.Second))
	defer stop()
	var wg sync.WaitGroup
	for range owners {
		s := newSem(t, countingClient(t, &events), prefix, n)
		wg.Go(func() {
			for ctx.Err() == nil {
				g, err := s.Acquire(ctx)
				if err != nil {
					return // the last waiters, once the count is reached
				}
				switch acquired.Add(1) {
				case warm:
					from.Store(events.Load())
				case total:
					to.Store(events.Load())
				}
				if err := s.Release(context.WithoutCancel(ctx), g); err != nil {
					t.Error(err)
				}
				if acquired.Load() >= total {
					return
				}
			}
		})
	}
	testkit.Eventually(t, 50*time.Second, "every acquisition", func() bool { return acquired.Load() >= total })
	stop() // the owners still waiting give up: the count is taken
	wg.Wait()
	per := float64(to.Load()-from.Load()) / (total - warm)
	t.Logf("%.2f watch events per acquisition, %d owners on %d permits", per, owners, n)
	if per > most {
		t.Fatalf("%.2f watch events per acquisition, want at most %g: releases wake waiters they do not admit", per, most)
	}
}

// Waiters each watch only the key just ahead of them: one deleted by
// another client and one given up, between the head and the last waiter,
// leave the chain whole. Releases out of order admit the head, then the
// last waiter, each with a token above every earlier one.
func TestSemaphoreChainSurvivesDeletions(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := semPrefix(t)
	cli := newClient(t)
	h1, h2 := newSem(t, cli, prefix, 2), newSem(t, newClient(t), prefix, 2)
	g1, g2 := mustAcquire(t, h1), mustAcquire(t, h2)
	head := acquireQueued(t, newSem(t, newClient(t), prefix, 2), cli, prefix, 3)
	deleted := newSem(t, newClient(t), prefix, 2)
	lost := make(chan error, 1)
	go func() { _, err := deleted.Acquire(testCtx(t, 10*time.Second)); lost <- err }()
	testkit.Eventually(t, 5*time.Second, "4 queued keys", func() bool { return countKeys(t, cli, prefix+"/q") == 4 })
	gaveUp := newSem(t, newClient(t), prefix, 2)
	ctx, cancel := context.WithCancel(testCtx(t, 10*time.Second))
	defer cancel()
	given := make(chan error, 1)
	go func() { _, err := gaveUp.Acquire(ctx); given <- err }()
	testkit.Eventually(t, 5*time.Second, "5 queued keys", func() bool { return countKeys(t, cli, prefix+"/q") == 5 })
	last := acquireQueued(t, newSem(t, newClient(t), prefix, 2), cli, prefix, 6)

	resp, err := cli.Get(context.Background(), prefix+"/q/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(context.Background(), string(resp.Kvs[3].Key)); err != nil {
		t.Fatal(err)
	}
	if err := <-lost; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Acquire whose waiting key was deleted: %v, want ErrLost", err)
	}
	cancel()
	if err := <-given; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire given up: %v, want context.Canceled", err)
	}
	if err := h2.Release(context.Background(), g2); err != nil {
		t.Fatal(err)
	}
	gh := <-head
	if gh.Slot != g2.Slot || gh.Token() <= max(g1.Token(), g2.Token()) {
		t.Fatalf("the head got %+v after %+v and %+v", gh, g1, g2)
	}
	if err := h1.Release(context.Background(), g1); err != nil {
		t.Fatal(err)
	}
	var gl semaphore.Grant
	select {
	case gl = <-last:
	case <-time.After(5 * time.Second):
		t.Fatal("the last waiter was not admitted: the chain broke where keys ahead of it went")
	}
	if gl.Slot != g1.Slot || gl.Token() <= gh.Token() {
		t.Fatalf("the last waiter got %+v after the head's %+v", gl, gh)
	}
}
