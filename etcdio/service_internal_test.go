package etcdio

import (
	"context"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

// TestTokenFailureFreesTheHold: when a grant's token cannot be issued, the
// acquisition fails, its key is deleted, and the service can acquire again
// (its semaphore was freed exactly once).
func TestTokenFailureFreesTheHold(t *testing.T) {
	cli := etcdtest.NewClient(t)
	boom := errors.New("boom")
	failing := *lockSpec
	failing.token = func(context.Context, *service, driver.Hold) (int64, error) { return 0, boom }
	svc, err := newService(&failing, cli, "/test/token-failure", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	l := lockService{svc}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx); !errors.Is(err, boom) {
		t.Fatalf("Lock with a failing token: %v, want boom", err)
	}
	// The grant is born whole: a failed token never records it.
	if _, held := l.Current(); held {
		t.Fatal("grant recorded although its token failed")
	}
	resp, err := cli.Get(ctx, "/test/token-failure/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("keys left after the failed Lock: %v, %v", resp, err)
	}
	failing.token = nil
	if _, err := l.Lock(ctx); err != nil {
		t.Fatalf("Lock after a failed token: %v (the hold's semaphore leaked?)", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestObserveAfterResignFindsKeyGone: a Resign whose delete finds the leader
// key already gone must not make Observe wait for a revision the mirror will
// never reach (a failed delete's header revision may be past every write
// under the prefix).
func TestObserveAfterResignFindsKeyGone(t *testing.T) {
	cli := etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := NewElection(cli, "/test/resign-gone")
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	e := es.(electionService)
	if err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	term, _ := e.Term()
	// The delete's reply as etcd gives it when the key is already gone: not
	// succeeded, at a revision past anything under the prefix.
	failed := &clientv3.TxnResponse{Succeeded: false, Header: &pb.ResponseHeader{Revision: int64(term.FencingToken) + 1000}}
	_, err = call(ctx, e.s, func(r actor.Reply[struct{}]) {
		g, ok := e.Current()
		if !ok {
			r.Answer(struct{}{}, errors.New("not leading"))
			return
		}
		if _, err := e.BeginRelease(driver.CreatedAt(g.Created)); err != nil {
			r.Answer(struct{}{}, err)
			return
		}
		r.Answer(struct{}{}, e.released(g, failed, false, nil))
	})
	if !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("release finding the key gone: %v, want ErrNotLeader", err)
	}
	octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
	defer ocancel()
	select {
	case _, ok := <-e.Observe(octx):
		if !ok {
			t.Fatal("Observe closed without a state")
		}
	case <-octx.Done():
		t.Fatal("Observe stalled after a Resign that found the key gone")
	}
}
