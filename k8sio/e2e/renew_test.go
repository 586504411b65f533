package e2e_test

import (
	"testing"
	"time"

	"github.com/ahrtr/disco/k8sio"
)

// TestHealthySessionNeverSuspended: a leader whose renewals the API
// server answers at once is never Suspended, whatever WithSuspendAfter's
// part: also below 1/3, the part of the TTL after which renewal rounds
// used to go (as on etcd, ZooKeeper and Redis).
func TestHealthySessionNeverSuspended(t *testing.T) {
	defer noneLeft(t)
	cs, _ := client(t)
	const ttl = 3 * time.Second
	e, err := k8sio.NewElection(cs, namespace, leaseName(t.Name()), k8sio.WithTTL(ttl), k8sio.WithSuspendAfter(0.2))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := background(t)
	events := e.Subscribe(ctx)
	if err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	neverSuspended(t, events, 2*ttl) // two TTLs: several rounds
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
