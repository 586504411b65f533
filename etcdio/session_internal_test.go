package etcdio

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/primitives"
)

// TestSessionEndsAtItsOwnDeadline stops the keepalive (the loop keeps
// running, as when keepalives cannot reach etcd) and checks that the session
// ends at the deadline it computed from the last acknowledged keepalive's
// send time: not later, and not before.
func TestSessionEndsAtItsOwnDeadline(t *testing.T) {
	cli := etcdtest.NewClient(t)
	s, err := NewSession(cli, WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := func() time.Time {
		d, err := call(context.Background(), s, func(r actor.Reply[time.Time]) { r.Answer(s.clock.Deadline(), nil) })
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Wait for one renewal, so the deadline comes from a keepalive.
	first := deadline()
	for limit := time.Now().Add(5 * time.Second); !deadline().After(first); {
		if time.Now().After(limit) {
			t.Fatal("no keepalive acknowledged within 5s")
		}
		s.probeLease()
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	stop := make(chan struct{})
	defer close(stop)
	testhook.PauseRenewal(s, stop)
	select {
	case <-s.Done():
	case <-time.After(2*s.TTL() + time.Second):
		t.Fatal("session still alive two TTLs after its keepalive stopped")
	}
	ended := time.Now()
	// The loop has exited (Done is closed after its last write): its final
	// deadline can be read now.
	if ended.Before(s.clock.Deadline()) {
		t.Fatalf("session ended %v before its deadline", s.clock.Deadline().Sub(ended))
	}
	if late := ended.Sub(s.clock.Deadline()); late > time.Second {
		t.Fatalf("session ended %v after its deadline", late)
	}
	if !errors.Is(s.Err(), primitives.ErrLost) {
		t.Fatalf("Err = %v, want ErrLost", s.Err())
	}
}

// One progress request per stream and silence: the watches of a stream
// whose quiet spells end while a request is on its way count it as theirs.
func TestOneProgressRequestPerStreamAndSilence(t *testing.T) {
	s := &Session{ttl: 8 * time.Second}
	if !s.claimProbe(0) {
		t.Fatal("the first quiet watch of a stream may not ask")
	}
	if s.claimProbe(0) {
		t.Fatal("a second watch of the stream asks while the first request is on its way")
	}
	if !s.claimProbe(1) {
		t.Fatal("a watch on a new stream may not ask")
	}
	s.probeAt = time.Now().Add(-s.silence())
	if !s.claimProbe(1) {
		t.Fatal("a watch may not ask a silence after the stream's last request")
	}
}
