package redisio

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// TestLostBeforeSuccessor: when a holder's key is deleted, the holder is
// told Lost before anyone else is granted the name, however long the
// cleanup that takes its dead hold out of the queue takes to be answered.
// The test holds the holder's cleanup back, after its script ran, until
// the waiter is granted (or a few seconds passed): with the Lost told only
// after the cleanup (as it was), the waiter held while the holder still
// believed it held.
func TestLostBeforeSuccessor(t *testing.T) {
	r := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin := newClient(t, r)
	const name = "lost-first"
	a := lockOn(t, r, name, WithTTL(time.Second))
	b := lockOn(t, r, name, WithTTL(time.Second))
	ha, err := a.acquire(ctx, false, "", rwlock.Write)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan driver.Hold, 1)
	go func() {
		h, err := b.acquire(ctx, false, "", rwlock.Write)
		if err != nil {
			t.Error(err)
		}
		granted <- h
	}()
	released := make(chan struct{})
	if _, err := loopCall(a.s, ctx, func() (struct{}, error) {
		a.s.afterCleanup = func() {
			select {
			case <-released:
			case <-time.After(3 * time.Second):
			}
		}
		return struct{}{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctx, ha.Key).Err(); err != nil {
		t.Fatal(err)
	}
	hb := <-granted
	_, stillHeld := a.Current()
	close(released)
	if stillHeld {
		t.Fatalf("the waiter holds %s (token %d) while the holder of the deleted %s has not been told Lost", hb.Key, hb.Token, ha.Key)
	}
	if hb.Token <= ha.Token {
		t.Fatalf("successor's token %d, not above the lost holder's %d", hb.Token, ha.Token)
	}
}
