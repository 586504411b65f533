package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// partition is a TCP proxy between one client and a ZooKeeper server that
// can cut everything in both directions.
type partition struct{ px *faultproxy.Proxy }

func newPartition(t *testing.T, server string) (*partition, string) {
	t.Helper()
	px, err := faultproxy.Listen("127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	return &partition{px}, px.Addr()
}

func (p *partition) cut()  { p.px.BlackholeTx(); p.px.BlackholeRx() }
func (p *partition) heal() { p.px.UnblackholeTx(); p.px.UnblackholeRx() }

// TestPartitionPastTimeoutLoses: a holder cut off from ZooKeeper for longer
// than its session timeout is Suspended, then Lost no later than the server
// can have expired its session; lock.Do's context ends with ErrLost; the
// successor's token is higher, and a guard rejects the zombie's.
func TestPartitionPastTimeoutLoses(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	p, via := newPartition(t, servers[0])
	const path = "/fault/partition"
	const timeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path, zkio.WithSessionTimeout(timeout)))
	w := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, zkio.WithSessionTimeout(timeout)))
	events := h.Subscribe(ctx)
	gd := guard.New()
	held := make(chan lock.Grant, 1)
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- lock.Do(ctx, h, func(ctx context.Context, g lock.Grant) error {
			held <- g
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	var gh lock.Grant
	select {
	case gh = <-held:
	case err := <-done:
		t.Fatal(err)
	}
	if err := gd.Check(gh.Token()); err != nil {
		t.Fatal(err)
	}
	successor := make(chan lock.Grant, 1)
	acquiredAt := make(chan time.Time, 1)
	go func() {
		g, err := w.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		acquiredAt <- time.Now()
		successor <- g
	}()

	p.cut()
	sus := testkit.NextOf[primitives.Suspended](t, events, 10*time.Second)
	lost := testkit.NextOf[primitives.Lost](t, events, 10*time.Second)
	if sus.Created != gh.Created || lost.Created != gh.Created || !errors.Is(lost.Err, primitives.ErrLost) {
		t.Fatalf("Suspended %+v, Lost %+v for grant %+v", sus, lost, gh)
	}
	if err := <-cause; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do's context ended with %v, want ErrLost", err)
	}
	if err := <-done; !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
	if !errors.Is(h.Err(), primitives.ErrLost) {
		t.Fatalf("Err = %v after the partition", h.Err())
	}
	gw := <-successor
	if at := <-acquiredAt; at.Before(sus.Deadline) {
		t.Fatalf("successor acquired at %v, before the zombie's deadline %v", at, sus.Deadline)
	}
	if gw.Token() <= gh.Token() {
		t.Fatalf("successor's token %d not above the zombie's %d", gw.Token(), gh.Token())
	}
	if err := gd.Check(gw.Token()); err != nil {
		t.Fatal(err)
	}
	if err := gd.Check(gh.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("guard given the zombie's token: %v, want ErrTokenStale", err)
	}
	p.heal()
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestShortPartitionResumes: a holder cut off for less than its session
// timeout is Suspended, then Resumed once it reaches ZooKeeper again, and
// still holds.
func TestShortPartitionResumes(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	p, via := newPartition(t, servers[0])
	const path = "/fault/short"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path, zkio.WithSessionTimeout(6*time.Second)))
	o := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, zkio.WithSessionTimeout(6*time.Second)))
	events := h.Subscribe(ctx)
	g, err := h.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.cut()
	sus := testkit.NextOf[primitives.Suspended](t, events, 10*time.Second)
	p.heal()
	res := testkit.NextOf[primitives.Resumed](t, events, 10*time.Second)
	if sus.Created != g.Created || res.Created != g.Created || time.Now().After(sus.Deadline) {
		t.Fatalf("Suspended %+v, Resumed %+v for %+v (now %v)", sus, res, g, time.Now())
	}
	if _, err := o.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock by another owner after Resumed: %v, want ErrLockTaken", err)
	}
	if err := h.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
}

// TestCancelOnSuspend: with WithCancelOnSuspend, lock.Do ends fn's context
// already at Suspended, with a cause wrapping ErrSuspended.
func TestCancelOnSuspend(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	p, via := newPartition(t, servers[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, "/fault/cancel", zkio.WithSessionTimeout(6*time.Second), zkio.WithCancelOnSuspend()))
	running := make(chan struct{})
	cause := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- lock.Do(ctx, l, func(ctx context.Context, g lock.Grant) error {
			close(running)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil
		})
	}()
	select {
	case <-running:
	case err := <-done:
		t.Fatal(err)
	}
	p.cut()
	if err := <-cause; !errors.Is(err, primitives.ErrSuspended) {
		t.Fatalf("fn's context ended with %v, want ErrSuspended", err)
	}
	p.heal()
	if err := <-done; !errors.Is(err, primitives.ErrSuspended) {
		t.Fatalf("Do = %v, want ErrSuspended", err)
	}
}

// TestLostAtDeadline: a holder cut off from ZooKeeper gets Lost at its
// Suspended's Deadline (within lostLate), before another client can hold;
// the deadline counts with the session timeout the server granted (the
// test server grants at most 20 ticks, 10s, of the 30s asked for here),
// never the one asked for.
func TestLostAtDeadline(t *testing.T) {
	t.Parallel()
	const lostLate = 250 * time.Millisecond
	servers := startZooKeeper(t)
	p, via := newPartition(t, servers[0])
	const path = "/fault/deadline"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock([]string{via}, path, zkio.WithTTL(30*time.Second)))
	w := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(servers, path, zkio.WithSessionTimeout(5*time.Second)))
	events := h.Subscribe(ctx)
	g, err := h.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := 20 * testserver.ZooKeeperTickTime; g.TTL != want {
		t.Fatalf("grant's TTL %v, want the %v the server grants", g.TTL, want)
	}
	acquiredAt := make(chan time.Time, 1)
	go func() {
		_, err := w.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		acquiredAt <- time.Now()
	}()
	queued(t, servers, path, 2)
	cutAt := time.Now()
	p.cut()
	defer p.heal()
	sus := testkit.NextOf[primitives.Suspended](t, events, 30*time.Second)
	lost := testkit.NextOf[primitives.Lost](t, events, 30*time.Second)
	lostAt := time.Now()
	if sus.Created != g.Created || lost.Created != g.Created {
		t.Fatalf("Suspended %+v, Lost %+v for grant %+v", sus, lost, g)
	}
	if sus.Deadline.After(cutAt.Add(g.TTL)) {
		t.Fatalf("Suspended's deadline %v is more than the granted %v after the cut at %v", sus.Deadline, g.TTL, cutAt)
	}
	if late := lostAt.Sub(sus.Deadline); late > lostLate {
		t.Fatalf("Lost %v after Suspended's deadline, more than %v", late, lostLate)
	}
	select {
	case at := <-acquiredAt:
		if !at.After(lostAt) {
			t.Fatalf("another client held at %v, before the holder was told Lost at %v", at, lostAt)
		}
	case <-ctx.Done():
		t.Fatal("the waiter never held")
	}
}

// TestSuspendAfter: with WithSuspendAfter(p), a holder the server has not
// heard from is Suspended p of the session timeout after the send time of
// the last request answered (the Suspended's Deadline less the timeout),
// not at the default half.
func TestSuspendAfter(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const ttl, part = 5 * time.Second, 0.2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := testkit.ClosedAtEnd[*zkio.Session](t)(zkio.NewSession(servers, zkio.WithTTL(ttl), zkio.WithSuspendAfter(part)))
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/fault/suspendafter", zkio.WithSession(s)))
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	resume := make(chan struct{})
	testhook.PauseRenewal(s, resume)
	defer close(resume)
	sus := testkit.NextOf[primitives.Suspended](t, events, 10*time.Second)
	after := time.Since(sus.Deadline.Add(-ttl))
	if want := time.Duration(part * float64(ttl)); after < want || after > want+time.Second {
		t.Fatalf("Suspended %v after the last answered request, want %v", after, want)
	}
}
