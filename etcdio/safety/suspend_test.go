package safety

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// partition stops all traffic between member i's clients and the member,
// without losing a byte (so connections survive), until the returned
// function is called.
func partition(t *testing.T, i int) (heal func()) {
	px := cluster(t).Member(i).Proxy()
	px.PauseTx()
	px.PauseRx()
	return func() {
		px.UnpauseTx()
		px.UnpauseRx()
	}
}

// A partition shorter than the TTL: the holder sees Suspended, then Resumed,
// and still holds.
func TestSuspendedThenResumed(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	cli := newClientOf(t, c.Member(0).NewClient)
	l, err := etcdio.NewLock(cli, "/safety/suspend/"+t.Name(), etcdio.WithTTL(6*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	heal := partition(t, 0)
	sus := testkit.NextOf[primitives.Suspended](t, events, 6*time.Second)
	heal()
	if sus.Created != g.Created || sus.Token != g.Token() {
		t.Fatalf("Suspended %+v for another grant than %+v", sus, g)
	}
	res := testkit.NextOf[primitives.Resumed](t, events, time.Until(sus.Deadline))
	if res.Created != g.Created {
		t.Fatalf("Resumed %+v for another grant", res)
	}
	if err := l.Release(ctx, g); err != nil {
		t.Fatalf("Release after Resumed: %v (the hold did not survive)", err)
	}
}

// A partition longer than the TTL: Suspended, then Lost; and the deadline
// Suspended announced was never later than the moment another owner
// acquired.
func TestSuspendedThenLost(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	prefix := "/safety/suspend/" + t.Name()
	cli := newClientOf(t, c.Member(0).NewClient)
	l, err := etcdio.NewLock(cli, prefix, etcdio.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	other, err := etcdio.NewLock(newClientOf(t, c.Member(1).NewClient), prefix, etcdio.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := l.Subscribe(ctx)
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan time.Time, 1)
	var og lock.Grant
	go func() {
		var err error
		og, err = other.Lock(ctx)
		if err == nil {
			got <- time.Now()
		}
	}()
	heal := partition(t, 0)
	defer heal()
	sus := testkit.NextOf[primitives.Suspended](t, events, 5*time.Second)
	lost := testkit.NextOf[primitives.Lost](t, events, 10*time.Second)
	if lost.Created != g.Created || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("Lost %+v, want the grant's loss", lost)
	}
	var acquiredAt time.Time
	select {
	case acquiredAt = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the other owner never acquired")
	}
	if sus.Deadline.After(acquiredAt) {
		t.Fatalf("Suspended promised the hold until %v, but another owner acquired at %v", sus.Deadline, acquiredAt)
	}
	if og.Token() <= g.Token() {
		t.Fatalf("successor's token %d not above %d", og.Token(), g.Token())
	}
}

// WithCancelOnSuspend ends Do's fn at Suspended, before any loss.
func TestDoCancelsAtSuspended(t *testing.T) {
	c := cluster(t)
	defer restoreCluster(t, c)
	cli := newClientOf(t, c.Member(0).NewClient)
	l, err := etcdio.NewLock(cli, "/safety/suspend/"+t.Name(), etcdio.WithTTL(6*time.Second), etcdio.WithCancelOnSuspend())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var heal func()
	err = lock.Do(ctx, l, func(ctx context.Context, g lock.Grant) error {
		heal = partition(t, 0)
		<-ctx.Done()
		heal()
		if !errors.Is(context.Cause(ctx), primitives.ErrSuspended) {
			t.Errorf("fn's context ended with %v, want ErrSuspended", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, primitives.ErrSuspended) || errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do = %v, want ErrSuspended and no loss", err)
	}
}
