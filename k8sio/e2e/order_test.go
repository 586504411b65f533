package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ahrtr/disco/k8sio"
	"github.com/ahrtr/disco/primitives/election"
)

// leaseState returns the Lease's holderIdentity and leaseTransitions.
func leaseState(t *testing.T, lease string) (holder string, transitions int32) {
	t.Helper()
	l, err := admin().CoordinationV1().Leases(namespace).Get(background(t), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil {
		holder = *h
	}
	if tr := l.Spec.LeaseTransitions; tr != nil {
		transitions = *tr
	}
	return holder, transitions
}

// A Campaign whose ctx ends while the API server holds its take returns
// promptly, and leaves nothing once the server answers again: the take,
// applied late, is resigned after it, never before, as every request of an
// election waits for the one asked for before it.
func TestCampaignGivenUpDuringItsTakeLeavesNothing(t *testing.T) {
	t.Cleanup(func() { noneLeft(t) })
	lease := leaseName(t.Name())
	ctx := background(t)
	createFree(t, lease)
	cs, link := client(t)
	defer link.Heal()
	take := func(r *http.Request) bool {
		return r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/leases/"+lease)
	}
	link.PauseMatching(take)
	e := closedAtEnd[election.Service](t)(k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity("given-up-take")))
	cctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	campaigned := make(chan error, 1)
	go func() { campaigned <- e.Campaign(cctx, "v") }()
	eventually(t, 10*time.Second, "the take held", func() bool { return link.Held(take) > 0 })
	giveUp()
	select {
	case err := <-campaigned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Campaign given up during its take: %v, want context.Canceled", err)
		}
	case <-time.After(prompt):
		t.Fatalf("Campaign given up during its take did not return within %v", prompt)
	}
	link.Heal() // the take goes through now, then the resign of its term
	eventually(t, 10*time.Second, "the Lease taken once, then free", func() bool {
		h, tr := leaseState(t, lease)
		return tr == 1 && h == ""
	})
	if _, leading := e.Term(); leading {
		t.Fatal("a Campaign given up leads")
	}
}
