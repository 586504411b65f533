package etcdio_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/internal/testkit"
)

// A Lock whose context ends returns that context's error, whatever the
// request in flight came back with: the caller's deadline travels to etcd
// with the request, and etcd's own timeout ("request timed out") can come
// back before the client's context reports its end. While one owner takes
// and releases the lock over and over, waiters give up after 0.5 to 20 ms;
// every failed Lock wraps context.DeadlineExceeded (most are it), and no
// key is left behind, not even the key of a transaction that etcd applied
// after its caller gave up.
func TestLockDeadlineErrorIsTheContexts(t *testing.T) {
	testkit.NoLeaks(t)
	prefix := prefixOf(t)
	cli := newClient(t)
	const waiters, attempts = 6, 150
	var (
		wg                sync.WaitGroup
		mu                sync.Mutex
		foreign           []error
		expired, acquired atomic.Int64
	)
	stop, done := make(chan struct{}), make(chan struct{})
	holder := newLock(t, newClient(t), prefix)
	go func() {
		defer close(done)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := holder.Lock(ctx)
			cancel()
			if err != nil {
				t.Error(err)
				return
			}
			if err := holder.Unlock(testCtx(t, 5*time.Second)); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	for range waiters {
		l := newLock(t, newClient(t), prefix)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range attempts {
				d := 500*time.Microsecond + rand.N(20*time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), d)
				_, err := l.Lock(ctx)
				cancel()
				switch {
				case err == nil:
					acquired.Add(1)
					if err := l.Unlock(testCtx(t, 5*time.Second)); err != nil {
						t.Error(err)
						return
					}
				case errors.Is(err, context.DeadlineExceeded):
					expired.Add(1)
				default:
					mu.Lock()
					foreign = append(foreign, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
	t.Logf("waiters: %d acquired, %d expired, %d other errors", acquired.Load(), expired.Load(), len(foreign))
	if len(foreign) > 0 {
		t.Fatalf("%d Lock calls whose context ended returned an error not wrapping it; first: %v", len(foreign), foreign[0])
	}
	defer dumpKeys(t, cli, prefix)
	testkit.Eventually(t, 5*time.Second, "no key left", func() bool { return countKeys(t, cli, prefix) == 0 })
}

func dumpKeys(t *testing.T, cli *clientv3.Client, prefix string) {
	resp, _ := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix())
	for _, kv := range resp.Kvs {
		t.Logf("left: %s create=%d mod=%d lease=%x value=%q", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Lease, kv.Value)
	}
}
