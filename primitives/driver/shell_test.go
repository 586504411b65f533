package driver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
)

func newShell() *driver.Shell {
	return driver.NewShell(driver.Spec{Kind: "lock", Name: "test: lock /x", NotHeld: lock.ErrNotHeld, Taken: lock.ErrLockTaken})
}

// next returns the next event of ch, failing t if none comes in time.
func next(t *testing.T, ch <-chan primitives.Event) primitives.Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
		return nil
	}
}

func TestShellGrantAndRelease(t *testing.T) {
	defer goleak.VerifyNone(t)
	sh := newShell()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := sh.Subscribe(ctx)
	if err := sh.Enter(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := sh.Enter(ctx, true); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("second try while acquiring: %v, want ErrLockTaken", err)
	}
	h := driver.Hold{Key: "k", Created: 7, Token: 9}
	if !sh.Grant(h, time.Now(), func(driver.Hold) bool { return true }) {
		t.Fatal("grant refused")
	}
	if cur, ok := sh.Current(); !ok || cur.Created != 7 || cur.Since.IsZero() {
		t.Fatalf("Current = %+v, %v", cur, ok)
	}
	if e, ok := next(t, events).(primitives.Acquired); !ok || e.Created != 7 || e.Token != 9 {
		t.Fatalf("first event %#v, want Acquired of 7", e)
	}
	if _, err := sh.BeginRelease(driver.CreatedAt(8)); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release of another grant: %v, want ErrNotHeld", err)
	}
	g, err := sh.BeginRelease(driver.CreatedAt(7))
	if err != nil || !sh.Held().Releasing() {
		t.Fatalf("BeginRelease: %v, releasing %v", err, sh.Held().Releasing())
	}
	if _, err := sh.BeginRelease(driver.Any); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("a second release in flight: %v, want ErrNotHeld", err)
	}
	if err := sh.SettleRelease(g, driver.Failed, errors.New("boom")); err == nil || sh.Held() == nil {
		t.Fatalf("failed release: %v, held %v: the grant must stand", err, sh.Held())
	}
	g, _ = sh.BeginRelease(driver.Any)
	if err := sh.SettleRelease(g, driver.Deleted, nil); err != nil {
		t.Fatal(err)
	}
	if e, ok := next(t, events).(primitives.Released); !ok || e.Created != 7 {
		t.Fatalf("event %#v, want Released of 7", e)
	}
	if _, ok := sh.Current(); ok {
		t.Fatal("Current after the release")
	}
	// The release left the shell: the next acquisition enters at once.
	if err := sh.Enter(ctx, true); err != nil {
		t.Fatalf("Enter after the release: %v", err)
	}
	sh.Leave()
	sh.Finish(fmt.Errorf("test: %w", primitives.ErrClosed))
	if _, ok := <-events; ok {
		t.Fatal("subscription open after Finish")
	}
}

// A release that failed may still have deleted the key (its answer was
// lost, or its caller gave up with the request on its way): the next
// release that finds the key gone, or the key's deletion seen before it,
// ends the grant as Released, not Lost.
func TestShellRetriedReleaseFindsTheKeyGone(t *testing.T) {
	sh := newShell()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := sh.Subscribe(ctx)
	_ = sh.Enter(ctx, false)
	sh.Grant(driver.Hold{Key: "k", Created: 7, Token: 9}, time.Now(), func(driver.Hold) bool { return true })
	sh.Leave()
	next(t, events) // Acquired
	g, _ := sh.BeginRelease(driver.Any)
	if err := sh.SettleRelease(g, driver.Failed, context.DeadlineExceeded); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("failed release: %v", err)
	}
	g, _ = sh.BeginRelease(driver.Any)
	if err := sh.SettleRelease(g, driver.Gone, nil); err != nil {
		t.Fatalf("retried release finding the key gone: %v, want nil", err)
	}
	if ev := next(t, events); ev != (primitives.Released{Key: "k", Token: 9, Created: 7}) {
		t.Fatalf("event %#v, want Released of 7", ev)
	}
	// The same when the key's deletion is seen before the retry.
	_ = sh.Enter(ctx, false)
	sh.Grant(driver.Hold{Key: "k", Created: 8, Token: 10}, time.Now(), func(driver.Hold) bool { return true })
	sh.Leave()
	next(t, events) // Acquired
	g, _ = sh.BeginRelease(driver.Any)
	_ = sh.SettleRelease(g, driver.Failed, context.DeadlineExceeded)
	sh.Lose(sh.KeyDeleted("k"), metrics.CauseKeyDeleted)
	if ev := next(t, events); ev != (primitives.Released{Key: "k", Token: 10, Created: 8}) {
		t.Fatalf("event %#v after the key's deletion was seen, want Released of 8", ev)
	}
	sh.Finish(primitives.ErrClosed)
}

// A grant whose caller gave up is undone and never announced; the caller
// leaves.
func TestShellRefusedGrant(t *testing.T) {
	sh := newShell()
	ctx := context.Background()
	events := sh.Subscribe(ctx)
	_ = sh.Enter(ctx, false)
	if sh.Grant(driver.Hold{Key: "k", Created: 1}, time.Now(), func(driver.Hold) bool { return false }) {
		t.Fatal("refused grant recorded")
	}
	if _, ok := sh.Current(); ok {
		t.Fatal("refused grant is current")
	}
	sh.Leave()
	sh.Finish(primitives.ErrClosed)
	for e := range events {
		t.Fatalf("event %#v after a refused grant", e)
	}
}

// A grant made while the session is suspended is followed by Suspended at
// once, with the session's deadline; Resume then reaches it.
func TestShellGrantWhileSuspended(t *testing.T) {
	sh := newShell()
	ctx := context.Background()
	events := sh.Subscribe(ctx)
	deadline := time.Now().Add(time.Minute)
	sh.Suspend(deadline)
	_ = sh.Enter(ctx, false)
	sh.Grant(driver.Hold{Key: "k", Created: 3, Token: 3}, time.Now(), func(driver.Hold) bool { return true })
	if _, ok := next(t, events).(primitives.Acquired); !ok {
		t.Fatal("want Acquired first")
	}
	if e, ok := next(t, events).(primitives.Suspended); !ok || !e.Deadline.Equal(deadline) || e.Created != 3 {
		t.Fatalf("event %#v, want Suspended with the deadline", e)
	}
	sh.Suspend(deadline) // already suspended: nothing new
	sh.Resume()
	if e, ok := next(t, events).(primitives.Resumed); !ok || e.Created != 3 {
		t.Fatalf("event %#v, want Resumed", e)
	}
	sh.Finish(primitives.ErrClosed)
}

// The session's end: Released if the service was closed, Lost otherwise; a
// release that finds the key gone is a loss and reports NotHeld.
func TestShellEnds(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		end  func(*driver.Shell) error
		want func(primitives.Event) bool
		// after is what Enter fails with once the grant ended (nil: the
		// service goes on, Enter succeeds).
		after error
	}{
		{"closed", func(sh *driver.Shell) error {
			_, ok := sh.EndFor(fmt.Errorf("x: %w", primitives.ErrClosed), "")
			return map[bool]error{true: nil, false: errors.New("nothing ended")}[ok]
		}, func(e primitives.Event) bool { _, ok := e.(primitives.Released); return ok }, primitives.ErrClosed},
		{"lost", func(sh *driver.Shell) error {
			sh.EndFor(fmt.Errorf("x: %w", primitives.ErrLost), "lease_expired")
			return nil
		}, func(e primitives.Event) bool {
			l, ok := e.(primitives.Lost)
			return ok && errors.Is(l.Err, primitives.ErrLost)
		}, primitives.ErrLost},
		{"gone", func(sh *driver.Shell) error {
			g, _ := sh.BeginRelease(driver.Any)
			if err := sh.SettleRelease(g, driver.Gone, nil); !errors.Is(err, lock.ErrNotHeld) {
				return fmt.Errorf("settle gone: %v, want ErrNotHeld", err)
			}
			return nil
		}, func(e primitives.Event) bool { _, ok := e.(primitives.Lost); return ok }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := newShell()
			events := sh.Subscribe(ctx)
			_ = sh.Enter(ctx, false)
			sh.Grant(driver.Hold{Key: "k", Created: 5}, time.Now(), func(driver.Hold) bool { return true })
			next(t, events)
			if err := tc.end(sh); err != nil {
				t.Fatal(err)
			}
			if e := next(t, events); !tc.want(e) {
				t.Fatalf("event %#v", e)
			}
			if err := sh.Enter(ctx, true); tc.after == nil && err != nil || !errors.Is(err, tc.after) {
				t.Fatalf("Enter after the end: %v, want %v", err, tc.after)
			}
			sh.Finish(primitives.ErrClosed)
			want := tc.after
			if want == nil {
				want = primitives.ErrClosed
			}
			if err := sh.Enter(ctx, false); !errors.Is(err, want) {
				t.Fatalf("Enter after Finish: %v, want %v", err, want)
			}
			select {
			case <-sh.Done():
			default:
				t.Fatal("Done open after Finish")
			}
		})
	}
}

// TestShellLostAfterErr: when a service ends with its session, a
// subscriber that sees Lost already sees the service's error, so that a
// supervisor that reacts to Lost knows to build a new service rather than
// campaign again on the dead one.
func TestShellLostAfterErr(t *testing.T) {
	ctx := context.Background()
	sh := newShell()
	events := sh.Subscribe(ctx)
	_ = sh.Enter(ctx, false)
	sh.Grant(driver.Hold{Key: "k", Created: 5}, time.Now(), func(driver.Hold) bool { return true })
	next(t, events)
	sh.EndFor(fmt.Errorf("x: %w", primitives.ErrLost), "lease_expired")
	if _, ok := next(t, events).(primitives.Lost); !ok {
		t.Fatal("no Lost")
	}
	if err := sh.Err(); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Err when Lost arrived: %v, want ErrLost", err)
	}
	if err := sh.Enter(ctx, true); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Enter once the service ended: %v, want ErrLost", err)
	}
	sh.Finish(errors.New("y"))
	if err := sh.Err(); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Err after Finish: %v, want the first end's (ErrLost)", err)
	}
}

// SuspensionOver is closed while the session is not suspended, open from
// Suspend (a later deadline keeps the same suspension) and closed at
// Resume; SuspendedUntil reports the latest deadline meanwhile.
func TestShellSuspensionOver(t *testing.T) {
	sh := newShell()
	isClosed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	if !isClosed(sh.SuspensionOver()) {
		t.Fatal("SuspensionOver open on a session never suspended")
	}
	d1 := time.Now().Add(time.Minute)
	sh.Suspend(d1)
	over := sh.SuspensionOver()
	if isClosed(over) {
		t.Fatal("SuspensionOver closed while suspended")
	}
	d2 := d1.Add(time.Second)
	sh.Suspend(d2)
	if got, ok := sh.SuspendedUntil(); !ok || !got.Equal(d2) {
		t.Fatalf("SuspendedUntil = %v, %v; want %v, true", got, ok, d2)
	}
	if sh.SuspensionOver() != over {
		t.Fatal("a new deadline made a new suspension")
	}
	sh.Resume()
	if !isClosed(over) || !isClosed(sh.SuspensionOver()) {
		t.Fatal("SuspensionOver open after Resume")
	}
	if _, ok := sh.SuspendedUntil(); ok {
		t.Fatal("SuspendedUntil reports a suspension after Resume")
	}
	sh.Suspend(d2)
	if isClosed(sh.SuspensionOver()) {
		t.Fatal("a second suspension's SuspensionOver is closed")
	}
}
