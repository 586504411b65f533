package zkio_test

import (
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/zkio"
)

// A release wakes only the waiter it admits (issue 25): with 16 owners on 2
// permits, each on its own session, the watch events the owners act on
// stay at most three per acquisition (the internal mutex's handoff to the
// next waiter, the mutex holder's look at the leases when one goes, and the
// holder's own watch on its lease, which its release deletes), not one per
// waiter.
func TestSemaphoreNoHerd(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	h := testkit.Herd{Owners: 16, Warm: 40, Total: 200}
	per, _ := testkit.WakeupsPerAcquisition(t, h, func(m *metrics.Metrics) (semaphore.Service, error) {
		return zkio.NewSemaphore(servers, "/herd", 2, zkio.WithMetrics(m))
	})
	t.Logf("%.2f wakeups per acquisition, %d owners on 2 permits", per, h.Owners)
	if per > 3 {
		t.Fatalf("%.2f wakeups per acquisition, want at most 3: releases wake waiters they do not admit", per)
	}
}
