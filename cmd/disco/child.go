package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// Environment variables CMD gets while disco holds the lock or leads.
const (
	envToken = "FENCING_TOKEN" // the hold's fencing token, decimal
	envScope = "FENCING_SCOPE" // the primitive's name (its prefix), the token's scope
)

// childExit is CMD's exit status when it was not zero: its own, or 128+N
// if signal N killed it.
type childExit struct {
	code int
	sig  syscall.Signal // the signal that killed CMD, or 0
}

func (c childExit) Error() string {
	if c.sig != 0 {
		return fmt.Sprintf("CMD killed by signal %d (%v)", int(c.sig), c.sig)
	}
	return fmt.Sprintf("CMD exited with status %d", c.code)
}

// errInterrupted ends a wait for a hold: disco got a signal before CMD ran.
var errInterrupted = errors.New("interrupted")

// supervisor runs CMD while a hold lasts. Before CMD starts, a SIGINT,
// SIGTERM or SIGHUP to disco ends the wait for the hold; once CMD runs,
// disco forwards such signals to CMD's process group; after CMD exits,
// disco ignores them while it releases.
type supervisor struct {
	what           string // "lock NAME", "leadership of NAME"
	release        string // how the hold ends after CMD: "release", "resignation"
	argv           []string
	grace          time.Duration
	stopAt         string // stopAtSuspended or stopAtLost
	stdin          io.Reader
	stdout, stderr io.Writer

	mu       sync.Mutex
	cancel   context.CancelFunc // ends the wait for the hold
	pgid     int                // CMD's process group while it runs, else 0
	finished bool               // CMD has run
	lost     bool               // the hold was lost while CMD ran
	doubted  bool               // the hold was suspended while CMD ran, and CMD stopped
	sig      syscall.Signal     // a signal that came before CMD started
	ended    error              // why the hold ended before CMD could start
}

// watchSignals makes ctx end at SIGINT, SIGTERM or SIGHUP until CMD
// starts, and forwards those signals to CMD while it runs. stop undoes it.
func (s *supervisor) watchSignals(ctx context.Context) (context.Context, func()) {
	ctx, s.cancel = context.WithCancel(ctx)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, stopSignals...)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case sig := <-ch:
				s.signalled(sig.(syscall.Signal))
			case <-quit:
				return
			}
		}
	})
	return ctx, func() {
		signal.Stop(ch)
		close(quit)
		wg.Wait()
		s.cancel()
	}
}

func (s *supervisor) signalled(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.pgid != 0:
		_ = syscall.Kill(-s.pgid, sig)
	case !s.finished && s.sig == 0:
		s.sig = sig
		s.cancel()
	}
}

// interrupted returns the exit error for a wait ended by a signal, or nil.
func (s *supervisor) interrupted(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sig == 0 {
		return nil
	}
	return &exitError{code: 128 + int(s.sig), err: fmt.Errorf("interrupted (%v) while waiting for %s", s.sig, what)}
}

// run runs CMD with the token in its environment until it exits, or until
// ctx ends (the hold was lost): then CMD's process group gets SIGTERM, and
// SIGKILL once CMD exits or the grace period passes, whichever is first.
// However CMD ended, run returns only once no process of CMD's group runs
// (what is left gets SIGKILL), so that none outlives the hold; should disco
// die first, its watcher kills the group. It returns nil if CMD exited with status 0, else a childExit or an
// exitError saying why CMD could not run.
func (s *supervisor) run(ctx context.Context, scope string, token fencing.Token) error {
	env := append(os.Environ(), envToken+"="+token.String(), envScope+"="+scope)
	s.mu.Lock()
	if s.sig != 0 {
		s.mu.Unlock()
		return errInterrupted
	}
	if ctx.Err() != nil { // lost (or suspended), or given up, before CMD could start
		cause := context.Cause(ctx)
		s.finished = true
		if errors.Is(cause, primitives.ErrLost) || errors.Is(cause, primitives.ErrSuspended) {
			s.ended = cause // else the caller's own end: no hold ended
		}
		s.mu.Unlock()
		return cause
	}
	// Its own process group, so that disco can stop CMD's children too.
	grp, err := startGroup(s.argv, env, s.stdin, s.stdout, s.stderr)
	if err != nil {
		s.finished = true
		s.mu.Unlock()
		return err
	}
	s.pgid = grp.pgid
	s.mu.Unlock()

	exited := make(chan error, 1)
	go func() { exited <- grp.cmd.Wait() }()
	select {
	case err = <-exited:
	case <-ctx.Done():
		killAt := time.Now().Add(s.grace)
		var se *primitives.SuspendedError
		s.mu.Lock()
		if errors.As(context.Cause(ctx), &se) {
			// The lease is unconfirmed: CMD must be gone before it may expire.
			s.doubted = true
			killAt = earlier(killAt, se.Deadline.Add(-killMargin))
			fmt.Fprintf(s.stderr, "disco: %s in doubt: its lease is unconfirmed and may expire at %s\ndisco: sending SIGTERM to %s (SIGKILL at %s)\n",
				s.what, se.Deadline.Format(clockTime), s.argv[0], killAt.Format(clockTime))
		} else {
			s.lost = true
			fmt.Fprintf(s.stderr, "disco: %s lost: %v\ndisco: sending SIGTERM to %s (SIGKILL after %v)\n",
				s.what, context.Cause(ctx), s.argv[0], s.grace)
		}
		s.mu.Unlock()
		grp.signal(syscall.SIGTERM)
		grace := time.NewTimer(time.Until(killAt))
		select {
		case err = <-exited:
		case <-grace.C:
			grp.signal(syscall.SIGKILL)
			err = <-exited
		}
		grace.Stop()
	}
	// Whatever is left in the group would run on without the hold: it is
	// killed, and gone, before the hold is released.
	grp.stop(s.stderr)
	s.mu.Lock()
	s.pgid, s.finished = 0, true
	s.mu.Unlock()
	return exitStatus(err)
}

// The values of --stop-at.
const (
	stopAtSuspended = "suspended" // stop CMD at Suspended, before the lease may expire
	stopAtLost      = "lost"      // stop CMD only once the hold is lost
)

// killMargin is how long before a suspended hold's deadline CMD's group
// gets SIGKILL, at the latest: time for the kernel to end it.
const killMargin = 250 * time.Millisecond

// clockTime formats the moments disco reports.
const clockTime = "15:04:05.000"

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// checkGrace validates cmd's --grace.
func checkGrace(cmd *cobra.Command, grace time.Duration) error {
	if grace < 0 {
		return argsErr(cmd, "--grace %v: must not be negative", grace)
	}
	return nil
}

// checkStopAt validates cmd's --stop-at.
func checkStopAt(cmd *cobra.Command, v string) error {
	if v != stopAtSuspended && v != stopAtLost {
		return argsErr(cmd, "--stop-at %q: want %q or %q", v, stopAtSuspended, stopAtLost)
	}
	return nil
}

// exitStatus turns cmd.Wait's error into nil or a childExit.
func exitStatus(err error) error {
	var xe *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &xe):
		if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return childExit{code: 128 + int(ws.Signal()), sig: ws.Signal()}
		}
		return childExit{code: xe.ExitCode()}
	default:
		return &exitError{code: exitFailure, err: err}
	}
}

// outcome turns what lock.Do or election.Lead returned into disco's exit:
// 3 on loss (whatever CMD's status), CMD's status, or the error.
func (s *supervisor) outcome(err error) error {
	if err == nil {
		return nil
	}
	if ie := s.interrupted(s.what); ie != nil && (errors.Is(err, errInterrupted) || errors.Is(err, context.Canceled)) {
		return ie
	}
	var ce childExit
	s.mu.Lock()
	doubted, ended, granted := s.doubted, s.ended, s.finished
	s.mu.Unlock()
	if !granted && errors.Is(err, primitives.ErrLost) {
		// The wait lost its place (its key deleted, its session lost)
		// before any grant: no hold was lost, and CMD did not run.
		return &exitError{code: exitFailure, err: fmt.Errorf("waiting for %s failed, so CMD did not run: %w", s.what, err)}
	}
	if ended != nil {
		// lock.Do or election.Lead handed over a hold that had ended already.
		if errors.Is(ended, primitives.ErrLost) {
			return &exitError{code: exitLost, err: fmt.Errorf("%s lost before CMD started, so CMD did not run: %w", s.what, ended)}
		}
		return &exitError{code: exitLost, err: fmt.Errorf("%s was in doubt before CMD started, so CMD did not run: %w", s.what, ended)}
	}
	if doubted && errors.Is(err, primitives.ErrSuspended) && !errors.Is(err, primitives.ErrLost) {
		// The lease was confirmed again after CMD was stopped: the hold
		// was released, but CMD did not finish under it.
		return &exitError{code: exitLost, err: fmt.Errorf("%s was in doubt while CMD ran, so CMD was stopped; the lease was confirmed again and the hold released", s.what)}
	}
	if errors.Is(err, primitives.ErrLost) {
		s.mu.Lock()
		seen := s.lost
		s.mu.Unlock()
		status := "CMD exited with status 0"
		if errors.As(err, &ce) {
			status = ce.Error()
		}
		if seen || doubted {
			// The cause is told already.
			return &exitError{code: exitLost, err: fmt.Errorf("%s lost while CMD ran; %s", s.what, status)}
		}
		// Not seen while CMD ran: lock.Do or election.Lead found the hold
		// gone once CMD had exited, almost always by its release (a loss
		// that came as CMD exited may be told here too). The hold may have
		// ended while CMD ran, unseen: still a loss, status 3.
		return &exitError{code: exitLost, err: fmt.Errorf("%s was found lost at its %s, once CMD had ended (%s): %w", s.what, s.release, status, err)}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee
	}
	if errors.As(err, &ce) {
		// CMD's status, and whatever else went wrong (a failed release).
		return &exitError{code: ce.code, err: besides(err, ce)}
	}
	return err
}

// besides returns the errors joined in err other than skip, or nil.
func besides(err error, skip error) error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var rest []error
	for _, e := range j.Unwrap() {
		if e != skip {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}
