package etcdio_test

import (
	"context"
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
	const most = 4.0 // the design needs 3: see semService
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
