package redisio_test

import (
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives/semaphore"
	"github.com/ahrtr/disco/redisio"
)

// A release wakes only the waiter it admits (issue 25): with 16 owners on 2
// permits, each on its own session, the wake messages handed to waiters
// stay at most three per acquisition (the release's message to the first
// waiter; a grant with permits still free passes one on), not one per
// waiter, and so do the wake messages the sessions receive: each goes to
// the session whose waiter it names, not to all 16. A waiter also looks on
// its timer (rechecks).
func TestSemaphoreNoHerd(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	h := testkit.Herd{Owners: 16, Warm: 40, Total: 200}
	per, got := testkit.WakeupsPerAcquisition(t, h, func(m *metrics.Metrics) (semaphore.Service, error) {
		return redisio.NewSemaphore(newClient(t, r), "herd", 2, redisio.WithMetrics(m))
	})
	t.Logf("%.2f wakeups per acquisition, %d owners on 2 permits; in all %v wake messages, %v rechecks, %v acquisitions", per, h.Owners,
		got[`disco_wake_messages_total{kind="semaphore"}`], got[`disco_rechecks_total{kind="semaphore"}`], got[`disco_acquisitions_total{kind="semaphore"}`])
	if per > 3 {
		t.Fatalf("%.2f wakeups per acquisition, want at most 3: releases wake waiters they do not admit", per)
	}
	if msgs := got[`disco_wake_messages_total{kind="semaphore"}`] / got[`disco_acquisitions_total{kind="semaphore"}`]; msgs > 3 {
		t.Fatalf("%.2f wake messages per acquisition, want at most 3: a message reaches sessions whose waiters it does not name", msgs)
	}
}
