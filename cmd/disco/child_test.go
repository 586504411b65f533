package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/primitives"
)

// A hold that ends (lost, or suspended with --stop-at=suspended) after it
// was granted but before CMD could start ends disco with status 3 saying
// that CMD did not run, not that it "exited with status 0"; CMD never runs.
// (lock.Do and election.Lead hand fn a context that may have ended already.)
func TestHoldEndedBeforeCommandStarted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		want  string
	}{
		{"lost", fmt.Errorf("lease expired: %w", primitives.ErrLost), "lock /x lost before CMD started, so CMD did not run: lease expired"},
		{"suspended", &primitives.SuspendedError{Key: "/x/k", Deadline: time.Now()}, "lock /x was in doubt before CMD started, so CMD did not run: hold /x/k suspended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			sup := &supervisor{what: "lock /x", argv: []string{"sh", "-c", "echo ran"}, grace: time.Second,
				stopAt: stopAtSuspended, stdout: &stdout, stderr: &stderr}
			_, stop := sup.watchSignals(context.Background())
			defer stop()
			ctx, cancel := context.WithCancelCause(context.Background())
			cancel(tc.cause)
			// What lock.Do returns after such an fn: fn's error joined with
			// the loss, or with the suspension (the hold then released).
			err := sup.outcome(errors.Join(sup.run(ctx, "/x", 1), tc.cause))
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitLost || !strings.HasPrefix(ee.Error(), tc.want) || strings.Contains(ee.Error(), "status 0") {
				t.Fatalf("outcome %#v (%v); want exit status %d saying %q", err, err, exitLost, tc.want)
			}
			if stdout.Len() != 0 || stderr.Len() != 0 {
				t.Fatalf("stdout %q, stderr %q: want nothing (CMD did not run)", &stdout, &stderr)
			}
		})
	}
}

// A context that ends for the caller's own reason (an interrupt, a
// deadline) before CMD starts is no ended hold: not status 3.
func TestCallerEndBeforeCommandStartedIsNoLoss(t *testing.T) {
	var stdout, stderr bytes.Buffer
	sup := &supervisor{what: "lock /x", argv: []string{"sh", "-c", "echo ran"}, grace: time.Second,
		stopAt: stopAtSuspended, stdout: &stdout, stderr: &stderr}
	_, stop := sup.watchSignals(context.Background())
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := sup.outcome(sup.run(ctx, "/x", 1))
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitLost {
		t.Fatalf("outcome %v: exit status 3, want no loss reported", err)
	}
	if stdout.Len() != 0 {
		t.Fatalf("CMD ran: %q", &stdout)
	}
}

// timedOut names --command-timeout only when its own bound ran out: not
// for a shorter bound of the caller's (lock.Do's on a release), nor for
// a cancellation, nor before the deadline.
func TestTimedOutNamesOnlyItsOwnBound(t *testing.T) {
	failed := fmt.Errorf("release: %w", context.DeadlineExceeded)
	wait := func(ctx context.Context) error {
		<-ctx.Done()
		return fmt.Errorf("release: %w", ctx.Err())
	}

	ctx, cancel := withCommandTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := timedOut(ctx, wait(ctx)); !strings.HasSuffix(err.Error(), "(--command-timeout 20ms ran out)") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("own bound ran out: %v", err)
	}

	parent, cancelParent := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelParent()
	ctx, cancel = withCommandTimeout(parent, time.Hour)
	defer cancel()
	if err := timedOut(ctx, wait(ctx)); strings.Contains(err.Error(), "--command-timeout") {
		t.Errorf("the caller's shorter bound ran out, but: %v", err)
	}

	ctx, cancel = withCommandTimeout(context.Background(), time.Hour)
	if err := timedOut(ctx, failed); err != failed {
		t.Errorf("before the deadline: %v", err)
	}
	cancel()
	if err := timedOut(ctx, wait(ctx)); strings.Contains(err.Error(), "--command-timeout") {
		t.Errorf("cancelled: %v", err)
	}
	if err := timedOut(ctx, nil); err != nil {
		t.Errorf("no error: %v", err)
	}
}
