package etcdio

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// TestSemaphoreSlotKeyDeletedByHandWhileClaimed: a claimant's claim checks
// only the slot key, so one whose read of the slots came before a holder's
// claim takes that holder's slot if someone deletes the holder's slot key
// first: for a while both think they hold the slot, as with a lock whose
// holder's key someone deleted both the next owner and the old one think
// they hold it. What protects a resource is what does for a lock: the two
// never share a token (the newcomer's is higher), the holder whose key was
// deleted is told Lost, and its loss does not touch the newcomer's claim.
func TestSemaphoreSlotKeyDeletedByHandWhileClaimed(t *testing.T) {
	testkit.NoLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	prefix := "/test/" + t.Name()
	defer admin.Delete(context.Background(), prefix, clientv3.WithPrefix())
	open := func() (semService, *Session) {
		s, err := NewSession(cli)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sem, err := NewSemaphore(cli, prefix, 2, WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sem.Close() })
		return sem.(semService), s
	}
	a, sa := open()
	b, _ := open()
	// b reads the queue and the slots as it enqueues, first, and claims
	// from that read only when told to.
	claiming, proceed := make(chan struct{}), make(chan struct{})
	claim := b.spec.token
	b.spec.token = func(ctx context.Context, svc *service, g driver.Hold) (int64, error) {
		close(claiming)
		select {
		case <-proceed:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return claim(ctx, svc, g)
	}
	bAcquired := make(chan semaphore.Grant, 1)
	go func() {
		g, err := b.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		bAcquired <- g
	}()
	select {
	case <-claiming:
	case <-ctx.Done():
		t.Fatal("b never claimed")
	}
	aEvents := a.Subscribe(ctx)
	ga, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// a learns of its slot key's deletion only once its loop goes on.
	resume := make(chan struct{})
	testhook.PauseSession(sa, resume)
	defer func() {
		select {
		case <-resume:
		default:
			close(resume)
		}
	}()
	if _, err := admin.Delete(ctx, prefix+"/slot/"+strconv.Itoa(ga.Slot)); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	gb := <-bAcquired
	if gb.Slot != ga.Slot {
		t.Skipf("b claimed slot %d, a holds %d: no race to check", gb.Slot, ga.Slot)
	}
	if _, held := a.Current(); !held {
		t.Fatal("a's hold ended before its loop went on")
	}
	if gb.FencingToken <= ga.FencingToken {
		t.Fatalf("b's token %d, a's %d on the same slot: want b's higher", gb.FencingToken, ga.FencingToken)
	}
	close(resume)
	for ev := range aEvents {
		if lost, ok := ev.(primitives.Lost); ok {
			if !strings.Contains(lost.Err.Error(), "slot key") {
				t.Fatalf("a Lost with %v, want its slot key deleted", lost.Err)
			}
			break
		}
	}
	// a's loss deletes what is left of its hold, its queue key, and not
	// b's claim.
	testkit.Eventually(t, 10*time.Second, "a's queue key gone", func() bool {
		resp, err := admin.Get(ctx, ga.Key)
		return err == nil && len(resp.Kvs) == 0
	})
	resp, err := admin.Get(ctx, prefix+"/slot/"+strconv.Itoa(gb.Slot))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != int64(gb.FencingToken) {
		t.Fatalf("b's claim after a's loss: %v, want the slot key at b's token %d", resp.Kvs, gb.FencingToken)
	}
	if _, held := b.Current(); !held {
		t.Fatal("b's hold ended")
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
}
