package memio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// TestSessionEndGrantsNothingOnIt: when a session ends (expired or
// closed), a waiter of that same session behind its holder is not granted
// the lock: its Lock fails with the session's error. Before, the session's
// services ended one at a time, in map order, and the holder's key, once
// removed, was granted to the waiter whose service had not ended yet (most
// runs: Lock returned a token on a session already gone).
func TestSessionEndGrantsNothingOnIt(t *testing.T) {
	eachSessionEnd(t, func(t *testing.T, st *memio.Store, s *memio.Session, end func()) {
		a, err := memio.NewLock(st, "/x", memio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		b, err := memio.NewLock(st, "/x", memio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waiting := make(chan error, 1)
		go func() {
			_, err := b.Lock(ctx)
			waiting <- err
		}()
		testkit.Eventually(t, 5*time.Second, "the second Lock queued", func() bool { return len(st.Keys("/x/")) == 2 })
		end()
		if err := <-waiting; err == nil {
			t.Fatal("Lock granted on a session that ended under it")
		}
	})
}

// eachSessionEnd runs test, 20 times (the order in which a session's
// services end varies) for each way a session ends, on a new Store and
// session; end ends the session.
func eachSessionEnd(t *testing.T, test func(t *testing.T, st *memio.Store, s *memio.Session, end func())) {
	for _, how := range []string{"expired", "closed"} {
		t.Run(how, func(t *testing.T) {
			for range 20 {
				st := memio.NewStore()
				s, err := memio.NewSession(st)
				if err != nil {
					t.Fatal(err)
				}
				end := s.Expire
				if how == "closed" {
					end = func() { s.Close() }
				}
				test(t, st, s, end)
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

// TestSessionEndAnnouncesNoDeadLeader: when a session ends with the
// leader of an election and a candidate queued behind it, an observer on
// another session sees the leader go, never the dead session's candidate
// lead: that candidate was never granted.
func TestSessionEndAnnouncesNoDeadLeader(t *testing.T) {
	eachSessionEnd(t, func(t *testing.T, st *memio.Store, s *memio.Session, end func()) {
		made := testkit.ClosedAtEnd[election.Service](t)
		leader := made(memio.NewElection(st, "/e", memio.WithSession(s)))
		behind := made(memio.NewElection(st, "/e", memio.WithSession(s)))
		queued := made(memio.NewElection(st, "/e"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := leader.Campaign(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		campaign := func(e election.Service, v string, keys int) <-chan error {
			ch := make(chan error, 1)
			go func() { ch <- e.Campaign(ctx, v) }()
			testkit.Eventually(t, 5*time.Second, v+" queued", func() bool { return len(st.Keys("/e/")) == keys })
			return ch
		}
		behindDone := campaign(behind, "b", 2)
		queuedDone := campaign(queued, "c", 3)
		seen := made(memio.NewElection(st, "/e")).Observe(ctx)
		if l := <-seen; l.Value != "a" {
			t.Fatalf("first observed %+v, want a leading", l)
		}
		end()
		if err := <-queuedDone; err != nil {
			t.Fatalf("c's Campaign: %v", err)
		}
		if err := <-behindDone; err == nil {
			t.Fatal("b's Campaign won on a session that ended")
		}
		for l := range seen {
			if l.Value == "b" {
				t.Fatalf("observed %+v leading: a candidate of the ended session, never granted", l)
			}
			if l.Value == "c" {
				break
			}
		}
	})
}
