package etcdio

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/driver"
)

// Close on a shared session as a grant reaches the loop (its slot claimed,
// the grant recorded after Close looked whether it held, before Close's own
// turn on the loop): the grant Close ends has both its keys deleted before
// Close returns, the slot key too, so the permit is free at once.
func TestSemaphoreCloseRacingGrant(t *testing.T) {
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := "/test/" + t.Name()
	defer cli.Delete(context.Background(), prefix, clientv3.WithPrefix())
	s, err := NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sem, err := NewSemaphore(cli, prefix, 1, WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	m := sem.(semService)
	claimed, proceed := make(chan struct{}), make(chan struct{})
	claim := m.spec.token
	m.spec.token = func(ctx context.Context, svc *service, g driver.Hold) (int64, error) {
		tok, err := claim(ctx, svc, g)
		close(claimed)
		<-proceed
		return tok, err
	}
	acquired := make(chan error, 1)
	go func() { _, err := sem.Acquire(ctx); acquired <- err }()
	<-claimed // the slot key is written; the grant is not on the loop yet
	resume := make(chan struct{})
	testhook.PauseSession(s, resume)
	close(proceed) // the grant goes to the paused loop
	testkit.Eventually(t, 10*time.Second, "the grant queued for the loop", func() bool { return s.mb.Len() >= 1 })
	closed := make(chan error, 1)
	go func() { closed <- sem.Close() }()
	testkit.Eventually(t, 10*time.Second, "Close queued behind the grant", func() bool { return s.mb.Len() >= 2 })
	close(resume)
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	<-acquired
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		t.Errorf("left in etcd once Close returned (the session lives on): %s = %q", kv.Key, kv.Value)
	}
}
