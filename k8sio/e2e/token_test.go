package e2e_test

import (
	"errors"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
	"github.com/ahrtr/disco/primitives"
)

// A leader's token is the Lease's resourceVersion the taking write was
// conditioned on: renewals change the Lease's resourceVersion, never the
// token; the next leader's token is above every resourceVersion the Lease
// had in the term before. A Lease deleted and created again never repeats
// a token: the next leader's token is above the deletion.
func TestTokenAcrossRenewalsAndRecreation(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	leases := admin().CoordinationV1().Leases(namespace)
	a, b, watcher := newDisco(t, lease, "a"), newDisco(t, lease, "b"), newDisco(t, lease, "watcher")
	events := a.Subscribe(ctx)
	if err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	la, _ := a.Term()
	renewalsSeen(t, lease, 2)
	l, err := leases.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if fencing.Token(rv) <= la.Token() {
		t.Fatalf("renewed Lease at resourceVersion %d, token %d: want renewals to move the resourceVersion on", rv, la.Token())
	}
	if ld, err := watcher.Leader(ctx); err != nil || ld.Token() != la.Token() || ld.Created != la.Created {
		t.Fatalf("an observer's Leader after renewals = %+v, %v; want the term %+v", ld, err, la)
	}
	gd := guard.New()
	if err := gd.Check(la.Token()); err != nil {
		t.Fatal(err)
	}

	// Deleted behind the leader's back: Lost; b creates the Lease again.
	if err := leases.Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if lost, ok := ev.(primitives.Lost); ok {
			if lost.Token != la.Token() || !errors.Is(lost.Err, primitives.ErrLost) {
				t.Fatalf("Lost %+v", lost)
			}
			break
		}
	}
	if err := b.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Term()
	if lb.Token() <= fencing.Token(rv) {
		t.Fatalf("token %d after the Lease was deleted at or after resourceVersion %d: a recreated Lease repeated an order", lb.Token(), rv)
	}
	if err := gd.Check(lb.Token()); err != nil {
		t.Fatal(err)
	}
	if err := gd.Check(la.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the deposed leader's token: %v, want ErrTokenStale", err)
	}
	// Once more, and the deposed leader campaigns again with a higher token.
	if err := leases.Delete(ctx, lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Campaign(ctx, "a again"); err != nil {
		t.Fatal(err)
	}
	la2, _ := a.Term()
	if la2.Token() <= lb.Token() {
		t.Fatalf("token %d after %d", la2.Token(), lb.Token())
	}
	if err := gd.Check(la2.Token()); err != nil {
		t.Fatal(err)
	}
	if err := gd.Check(lb.Token()); !errors.Is(err, fencing.ErrTokenStale) {
		t.Fatalf("the deposed leader's token: %v, want ErrTokenStale", err)
	}
	a.Close()
	b.Close()
	watcher.Close()
}
