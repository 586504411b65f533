package etcdio

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// lastSecondLease answers every TimeToLive of a lease etcd has as etcd does
// in the lease's last second: TTL 0 (etcd truncates the time left to whole
// seconds; a lease it no longer has is -1). With WithTTL(time.Second), the
// shortest TTL accepted, that is every answer.
type lastSecondLease struct{ clientv3.Lease }

func (l lastSecondLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	resp, err := l.Lease.TimeToLive(ctx, id, opts...)
	if err == nil && resp.TTL > 0 {
		r := *resp
		r.TTL = 0
		return &r, nil
	}
	return resp, err
}

// TestLeaseInItsLastSecondLives: a lease check answered with TTL 0 (under
// a second left) says the lease lives. A lock's Unlock that finds its key
// deleted by someone else returns ErrNotHeld, and a semaphore holder whose
// slot key someone deleted is told Lost for that; the session lives on
// both times. Before, TTL 0 read as gone: the session ended Lost ("lease
// revoked or expired") with every hold on it, on every such check for a
// session with a TTL of one second.
func TestLeaseInItsLastSecondLives(t *testing.T) {
	testkit.NoLeaks(t)
	setup := func(t *testing.T) (context.Context, *clientv3.Client, *Session) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
		cli.Lease = lastSecondLease{cli.Lease}
		t.Cleanup(func() { admin.Delete(context.Background(), "/test/"+t.Name(), clientv3.WithPrefix()) })
		s, err := NewSession(cli)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return ctx, admin, s
	}
	t.Run("lock", func(t *testing.T) {
		ctx, admin, s := setup(t)
		l, err := NewLock(s.Client(), "/test/"+t.Name(), WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		g, err := l.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Delete(ctx, g.Key); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Unlock of a key deleted by someone else: %v, want ErrNotHeld", err)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("session ended: %v", err)
		}
	})
	t.Run("semaphore", func(t *testing.T) {
		ctx, admin, s := setup(t)
		sem, err := NewSemaphore(s.Client(), "/test/"+t.Name(), 1, WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		defer sem.Close()
		events := sem.Subscribe(ctx)
		g, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Delete(ctx, "/test/"+t.Name()+"/slot/0"); err != nil {
			t.Fatal(err)
		}
		for ev := range events {
			lost, ok := ev.(primitives.Lost)
			if !ok {
				continue
			}
			if !strings.Contains(lost.Err.Error(), "deleted by another client") {
				t.Fatalf("hold of %s Lost with %v, want its slot key deleted by another client", g.Key, lost.Err)
			}
			if err := s.Err(); err != nil {
				t.Fatalf("session ended: %v", err)
			}
			return
		}
		t.Fatal("no Lost event")
	})
}
