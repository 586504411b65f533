package e2e_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/k8sio"
)

// An Observe whose first read of the Lease waits on an API server that does
// not answer ends when the service is closed: its channel closes soon
// after Close returns. Before, the read was bounded by Observe's ctx alone
// and outlived Close.
func TestObserveEndsAtClose(t *testing.T) {
	lease := leaseName(t.Name())
	cs, link := client(t)
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity("observe-close"))
	if err != nil {
		t.Fatal(err)
	}
	link.Pause()
	defer link.Heal()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for range e.Observe(background(t)) {
		}
	}()
	list := func(req *http.Request) bool {
		return req.Method == http.MethodGet && strings.Contains(req.URL.RawQuery, "fieldSelector") &&
			!strings.Contains(req.URL.RawQuery, "watch")
	}
	eventually(t, 10*time.Second, "Observe's read waits at the pause", func() bool { return link.Held(list) > 0 })
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Logf("Close = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("Observe's channel still open 5s after Close returned")
	}
}

// A Resign whose ctx ends while the candidate's loop waits on the API
// server (a renewal held at a pause) changes nothing: the term stands once
// the server answers again, and a retried Resign ends it. Before, the loop
// ran the abandoned Resign once it was free: the term ended after Resign
// had returned an error, and the retry got ErrNotLeader.
func TestResignGivenUpWhileTheLoopWaits(t *testing.T) {
	defer noneLeft(t)
	lease := leaseName(t.Name())
	ctx := background(t)
	cs, link := client(t)
	e, err := k8sio.NewElection(cs, namespace, lease, k8sio.WithIdentity("resign-given-up"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	link.Pause()
	update := func(req *http.Request) bool { return req.Method == http.MethodPut }
	eventually(t, 20*time.Second, "a renewal held at the pause", func() bool { return link.Held(update) > 0 })
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = e.Resign(rctx)
	cancel()
	link.Heal()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Resign while the loop waits, past its deadline: %v", err)
	}
	// A Proclaim runs on the loop after the abandoned Resign's request.
	if err := e.Proclaim(ctx, "b"); err != nil {
		t.Fatalf("Proclaim after a Resign that returned an error: %v", err)
	}
	if _, leading := e.Term(); !leading {
		t.Fatal("the term ended after its Resign returned an error")
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("retried Resign: %v", err)
	}
}
