package memio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
)

// TestSessionEndGrantsNothingOnIt: when a session ends (expired or
// closed), a waiter of that same session behind its holder is not granted
// the lock: its Lock fails with the session's error. Before, the session's
// services ended one at a time, in map order, and the holder's key, once
// removed, was granted to the waiter whose service had not ended yet (most
// runs: Lock returned a token on a session already gone).
func TestSessionEndGrantsNothingOnIt(t *testing.T) {
	for _, how := range []string{"expired", "closed"} {
		t.Run(how, func(t *testing.T) {
			for range 20 { // the order in which services end varies
				st := memio.NewStore()
				s, err := memio.NewSession(st)
				if err != nil {
					t.Fatal(err)
				}
				a, err := memio.NewLock(st, "/x", memio.WithSession(s))
				if err != nil {
					t.Fatal(err)
				}
				b, err := memio.NewLock(st, "/x", memio.WithSession(s))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if _, err := a.Lock(ctx); err != nil {
					t.Fatal(err)
				}
				waiting := make(chan error, 1)
				go func() {
					_, err := b.Lock(ctx)
					waiting <- err
				}()
				testkit.Eventually(t, 5*time.Second, "the second Lock queued", func() bool { return len(st.Keys("/x/")) == 2 })
				if how == "expired" {
					s.Expire()
				} else {
					s.Close()
				}
				if err := <-waiting; err == nil {
					t.Fatalf("Lock granted on a session that %s under it", how)
				}
				cancel()
			}
		})
	}
}

// TestDoubleBarrierRefusesAnotherStoresSession: a double barrier given a
// session of another Store is refused with ErrInvalidArgument, as every
// other primitive is. Before, it was made, and its Enter and the session's
// end changed two Stores under one Store's lock (a data race).
func TestDoubleBarrierRefusesAnotherStoresSession(t *testing.T) {
	s, err := memio.NewSession(memio.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := memio.NewDoubleBarrier(memio.NewStore(), "/b", 2, memio.WithSession(s)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("NewDoubleBarrier with another Store's session: %v, want ErrInvalidArgument", err)
	}
}

// TestRefusedSemaphoreRecordsNoPermits: a NewSemaphore refused for its
// options leaves no permit count behind, so the name's next user sets its
// own. Before, the refused call recorded its count first, and the next
// NewSemaphore with another count failed with ErrPermitMismatch.
func TestRefusedSemaphoreRecordsNoPermits(t *testing.T) {
	st := memio.NewStore()
	if _, err := memio.NewSemaphore(st, "/s", 3, memio.WithTTL(time.Millisecond)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("NewSemaphore with a 1 ms TTL: %v, want ErrInvalidArgument", err)
	}
	sem, err := memio.NewSemaphore(st, "/s", 5)
	if err != nil {
		t.Fatalf("NewSemaphore after a refused one: %v", err)
	}
	sem.Close()
}
