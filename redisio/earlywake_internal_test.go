package redisio

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// TestWakeBeforeTheWaiterRegisters: the release that grants a waiter can
// run between the waiter's enqueue and its registration on its session's
// loop, so that the wake message reaches the session first. The waiter
// takes that wake when it registers and is granted by it: a wait makes
// no request before a wake or its re-check timer, so a wake dropped here
// would leave the waiter to its timer.
func TestWakeBeforeTheWaiterRegisters(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	reg, m := testkit.NewMetrics(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const name = "early-wake"
	a := lockOn(t, r, name)
	b := lockOn(t, r, name, WithMetrics(m))
	ha, err := a.acquire(ctx, false, "", rwlock.Write)
	if err != nil {
		t.Fatal(err)
	}
	// Set before b's first acquisition, which alone reads it.
	b.s.beforeWait = func(key string) {
		if err := a.release(ctx, func(h driver.Hold) bool { return h.Key == ha.Key }); err != nil {
			t.Error(err)
			return
		}
		testkit.Eventually(t, 10*time.Second, "the wake message at the waiter's session", func() bool {
			return testkit.Gather(t, reg)[`disco_wake_messages_total{kind="lock"}`] >= 1
		})
	}
	hb, err := b.acquire(ctx, false, "", rwlock.Write)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Token <= ha.Token {
		t.Fatalf("token %d after %d", hb.Token, ha.Token)
	}
	got := testkit.Gather(t, reg)
	if w := got[`disco_wakeups_total{kind="lock"}`]; w != 1 {
		t.Fatalf("%v wakeups, want 1: the wake that came before the waiter registered was not taken", w)
	}
	if n := got[`disco_rechecks_total{kind="lock"}`]; n != 0 {
		t.Fatalf("%v timed looks, want none", n)
	}
}
