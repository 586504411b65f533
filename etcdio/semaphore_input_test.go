package etcdio_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/primitives"
)

// Without WithContext, construction gives up after 10 seconds when etcd
// does not answer: the semaphore's record of its permits too, not only its
// session's lease.
func TestNewSemaphoreGivesUpOnDeadCluster(t *testing.T) {
	t.Parallel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	done := make(chan error, 1)
	go func() {
		s, err := etcdio.NewSemaphore(cli, prefixOf(t), 2)
		if err == nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("NewSemaphore on a cluster that is down: no error")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("NewSemaphore on a cluster that is down still waits after 20s; construction gives up after 10s")
	}
}

// Only keys of the semaphore's own layout count: a key written under its
// queue by hand (no lease) or a nested name's keys (a lock at NAME/q/sub)
// take no permit.
func TestSemaphoreIgnoresForeignKeys(t *testing.T) {
	prefix := semPrefix(t)
	cli := newClient(t)
	ctx := testCtx(t, 20*time.Second)
	if _, err := cli.Put(ctx, prefix+"/q/stray", ""); err != nil {
		t.Fatal(err)
	}
	defer cli.Delete(ctx, prefix+"/q/stray")
	l := newLock(t, newClient(t), prefix+"/q/sub")
	mustLock(t, l)
	s := newSem(t, cli, prefix, 1)
	g, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire of a free permit beside a stray key and a nested lock: %v", err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// WithValue is NewLock's alone: a double barrier refuses it.
func TestDoubleBarrierRefusesWithValue(t *testing.T) {
	d, err := etcdio.NewDoubleBarrier(newClient(t), prefixOf(t), 2, etcdio.WithValue("x"))
	if !errors.Is(err, primitives.ErrInvalidArgument) {
		if err == nil {
			d.Close()
		}
		t.Fatalf("NewDoubleBarrier with WithValue: %v, want an error wrapping ErrInvalidArgument", err)
	}
}
