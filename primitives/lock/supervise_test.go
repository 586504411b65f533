package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestMain serves etcd from a child process, so goleak sees only this
// process's goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

// singleton is one test's worker setup: a client, a prefix, and a
// constructor of lock services on them that counts what it built.
type singleton struct {
	cli    *clientv3.Client
	prefix string
	mu     sync.Mutex
	built  int
}

func newSingleton(t *testing.T) *singleton {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	cli, err := embedded.NewClient(etcdtest.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &singleton{cli: cli, prefix: "/test/supervise/" + t.Name()}
}

func (w *singleton) newService(ctx context.Context) (lock.Service, error) {
	w.mu.Lock()
	w.built++
	w.mu.Unlock()
	return etcdio.NewLock(w.cli, w.prefix, etcdio.WithTTL(5*time.Second), etcdio.WithContext(ctx))
}

// keys returns how many keys are under the prefix.
func (w *singleton) keys(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := w.cli.Get(ctx, w.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

var fast = lock.WithBackoff(10*time.Millisecond, 100*time.Millisecond)

func TestSuperviseWorkerEnds(t *testing.T) {
	w := newSingleton(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := lock.Supervise(ctx, w.newService, func(ctx context.Context, g lock.Grant) error { return nil }, fast)
	if err != nil || w.built != 1 {
		t.Fatalf("Supervise = %v with %d services, want nil with 1", err, w.built)
	}
	boom := errors.New("boom")
	err = lock.Supervise(ctx, w.newService, func(ctx context.Context, g lock.Grant) error { return boom }, fast)
	if !errors.Is(err, boom) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Supervise = %v, want fn's error alone", err)
	}
	if n := w.keys(t); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}

// The worker is restarted with a higher token after its session is lost,
// and the context's end stops it promptly, leaving no key.
func TestSuperviseWorkerRejoinsAndStops(t *testing.T) {
	w := newSingleton(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holds := make(chan lock.Grant)
	done := make(chan error, 1)
	go func() {
		done <- lock.Supervise(ctx, w.newService, func(ctx context.Context, g lock.Grant) error {
			holds <- g
			<-ctx.Done()
			return ctx.Err()
		}, fast)
	}()
	var last lock.Grant
	for round := range 3 {
		g := <-holds
		if g.Token() <= last.Token() {
			t.Fatalf("round %d: token %d not above %d", round, g.Token(), last.Token())
		}
		last = g
		if round < 2 {
			if _, err := w.cli.Revoke(ctx, clientv3.LeaseID(g.LeaseID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	start := time.Now()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Supervise = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Supervise took %v to stop", took)
	}
	if w.built != 3 {
		t.Errorf("%d services built, want 3 (one per session)", w.built)
	}
	if n := w.keys(t); n != 0 {
		t.Fatalf("%d keys left", n)
	}
}
