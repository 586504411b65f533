package etcdio

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testkit"
)

// A semaphore's Close on a shared session while etcd does not answer waits
// for one attempt, as every other primitive's Close does: the holder's
// slot key goes with its queue key in the background, not in a second
// attempt after the first ran out.
func TestSemaphoreCloseUnreachableWaitsOneAttempt(t *testing.T) {
	testkit.NoLeaks(t)
	cli, px := etcdtest.NewProxiedClient(t)
	s, err := NewSession(cli, WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sem, err := NewSemaphore(cli, "/test/"+t.Name(), 1, WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := sem.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	px.BlackholeTx()
	px.BlackholeRx()
	defer func() { px.UnblackholeTx(); px.UnblackholeRx() }()
	bound := s.bound.get()
	start := time.Now()
	err = sem.Close()
	if took := time.Since(start); took > bound+time.Second {
		t.Fatalf("Close with etcd cut off took %v (%v), more than one attempt's bound of %v", took, err, bound)
	}
}
