package etcdio

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
)

// TestTokenFailureFreesTheHold: when a grant's token cannot be issued, the
// acquisition fails, its key is deleted, and the service can acquire again
// (the hold's semaphore was freed exactly once).
func TestTokenFailureFreesTheHold(t *testing.T) {
	cli, err := embedded.NewClient(etcdtest.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	svc, err := NewLock(cli, "/test/token-failure")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	l := svc.(*lockService)
	boom := errors.New("boom")
	l.tokenFor = func(context.Context, hold) (int64, error) { return 0, boom }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx); !errors.Is(err, boom) {
		t.Fatalf("Lock with a failing token: %v, want boom", err)
	}
	// The failed Lock ended its hold on the loop before returning, not
	// later when the key's deletion comes back through the watch.
	if _, held := l.current(); held {
		t.Fatal("hold still recorded after Lock failed")
	}
	resp, err := cli.Get(ctx, "/test/token-failure/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys left after the failed Lock: %v, %v", resp, err)
	}
	l.tokenFor = nil
	if _, err := l.Lock(ctx); err != nil {
		t.Fatalf("Lock after a failed token: %v (the hold's semaphore leaked?)", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
