package driver_test

import (
	"testing"
	"time"

	"github.com/ahrtr/disco/primitives/driver"
)

// A clock of a 10 s lease granted at t0, suspended after 5 s: each step is
// something the session's loop tells it, and what it must report.
func TestClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	const s = time.Second
	type step struct {
		tick    time.Duration // Tick at t0+tick
		renewed time.Duration // or Renewed(sent=t0+renewed, now=t0+now)
		now     time.Duration
		broken  time.Duration // or Broken at t0+broken
		want    driver.Change
		next    time.Duration // Next afterwards (-1: zero time)
	}
	tick := func(d time.Duration, want driver.Change, next time.Duration) step {
		return step{tick: d, renewed: -1, broken: -1, want: want, next: next}
	}
	renew := func(sent, now time.Duration, want driver.Change, next time.Duration) step {
		return step{tick: -1, renewed: sent, now: now, broken: -1, want: want, next: next}
	}
	broken := func(d time.Duration, want driver.Change, next time.Duration) step {
		return step{tick: -1, renewed: -1, broken: d, want: want, next: next}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"healthy: renewals keep it steady", []step{
			tick(4*s, driver.Steady, 5*s),
			renew(3*s, 4*s, driver.Steady, 8*s),
			tick(7*s, driver.Steady, 8*s),
		}},
		{"the deadline counts from the send, not the reply", []step{
			renew(2*s, 4*s, driver.Steady, 7*s), // sent at 2 s: deadline 12 s, suspend at 7 s
			tick(7*s, driver.Suspend, 12*s),
			tick(12*s, driver.Expire, -1),
		}},
		{"suspended, then resumed by a fresh renewal", []step{
			tick(5*s, driver.Suspend, 10*s),
			tick(6*s, driver.Steady, 10*s), // reported once
			renew(6*s, 7*s, driver.Resume, 11*s),
		}},
		{"a stale renewal does not resume", []step{
			tick(6*s, driver.Suspend, 10*s),
			renew(1*s, 8*s, driver.Steady, 11*s), // extends the deadline, but 7 s old
			tick(11*s, driver.Expire, -1),
		}},
		{"a renewal after the deadline revives nothing", []step{
			tick(5*s, driver.Suspend, 10*s),
			renew(9*s, 10*s, driver.Expire, -1),
			renew(10*s, 11*s, driver.Steady, -1),
			tick(12*s, driver.Steady, -1),
		}},
		{"a broken connection suspends at once; only a later renewal resumes", []step{
			broken(1*s, driver.Suspend, 10*s),
			broken(2*s, driver.Steady, 10*s),
			renew(1*s, 3*s, driver.Steady, 11*s), // sent before the break was last seen
			renew(3*s, 4*s, driver.Resume, 8*s),
		}},
		{"an out-of-order acknowledgement never moves the deadline back", []step{
			renew(4*s, 5*s, driver.Steady, 9*s),
			renew(2*s, 5*s, driver.Steady, 9*s),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := driver.NewClock(t0, 10*s, 5*s)
			for i, st := range tc.steps {
				var got driver.Change
				switch {
				case st.tick >= 0:
					got = c.Tick(at(st.tick))
				case st.renewed >= 0:
					got = c.Renewed(at(st.renewed), at(st.now), 0)
				default:
					got = c.Broken(at(st.broken))
				}
				if got != st.want {
					t.Fatalf("step %d: %v, want %v", i, got, st.want)
				}
				want := time.Time{}
				if st.next >= 0 {
					want = at(st.next)
				}
				if !c.Next().Equal(want) {
					t.Fatalf("step %d: Next %v, want %v", i, c.Next().Sub(t0), st.next)
				}
			}
		})
	}
}

// The TTL a renewal reports replaces the clock's own for that renewal (etcd
// answers each keepalive with the lease's TTL).
func TestClockRenewedTTL(t *testing.T) {
	t0 := time.Now()
	c := driver.NewClock(t0, 10*time.Second, 5*time.Second)
	c.Renewed(t0.Add(time.Second), t0.Add(time.Second), 20*time.Second)
	if want := t0.Add(21 * time.Second); !c.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", c.Deadline(), want)
	}
	if c.TTL() != 10*time.Second || c.SuspendAfter() != 5*time.Second {
		t.Fatalf("TTL %v, SuspendAfter %v", c.TTL(), c.SuspendAfter())
	}
}

// A renewal sent at the very instant the connection was found broken does
// not resume, unless the store itself said the connection was mended then
// (a fake clock that did not move between the two).
func TestClockMended(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	c := driver.NewClock(t0, 10*time.Second, 5*time.Second)
	if got := c.Broken(t0); got != driver.Suspend {
		t.Fatalf("Broken: %v", got)
	}
	if got := c.Renewed(t0, t0, 0); got != driver.Steady {
		t.Fatalf("a renewal sent at the break: %v, want steady", got)
	}
	c.Mended(t0)
	if got := c.Renewed(t0, t0, 0); got != driver.Resume {
		t.Fatalf("a renewal sent once mended: %v, want resume", got)
	}
	c.Mended(t0.Add(-time.Second)) // before the break: a no-op
	if got := c.Broken(t0.Add(time.Second)); got != driver.Suspend {
		t.Fatalf("Broken again: %v", got)
	}
	c.Mended(t0)
	if got := c.Renewed(t0.Add(time.Second), t0.Add(time.Second), 0); got != driver.Steady {
		t.Fatalf("mended before the last break: %v, want steady", got)
	}
}
