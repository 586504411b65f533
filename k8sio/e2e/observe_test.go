package e2e_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
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
	testkit.Eventually(t, 10*time.Second, "Observe's read waits at the pause", func() bool { return link.Held(list) > 0 })
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
