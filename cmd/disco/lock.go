package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/lock"
)

func newLockCmd(g *globals) *cobra.Command {
	var grace time.Duration
	var stopAt, value string
	cmd := &cobra.Command{
		Use:   "lock NAME -- CMD [ARGS...]",
		Short: "Run CMD while holding the lock NAME",
		Long: `Wait for the lock NAME, run CMD with FENCING_TOKEN (the hold's fencing token)
and FENCING_SCOPE (NAME) in its environment, and release the lock when CMD
exits. disco exits with CMD's status.

When the lock's lease goes unconfirmed while CMD runs (etcd did not
acknowledge a renewal for half the TTL: Suspended), CMD's process group gets
SIGTERM, then SIGKILL after --grace or just before the lease may expire,
whichever is first, so that CMD is gone before anyone else can hold the
lock; disco then releases and exits with status 3, also if the lease is
confirmed again meanwhile (CMD did not finish under the lock). With
--stop-at=lost, disco waits for the loss itself (the lease expired or was
revoked, the key was deleted) and then stops CMD the same way, SIGKILL after
--grace: CMD may then run on beside the next holder, until its token is
refused. Either way disco exits with status 3 (also when the hold ended
after it was granted but before CMD could start: CMD then does not run;
and when the release after CMD finds the hold lost, which disco did not
see while CMD ran).
SIGINT, SIGTERM and SIGHUP (the terminal or ssh session closed) sent to
disco are passed on to CMD; before CMD starts they end the wait (status
128+signal). --grace must not be negative.

CMD runs in a process group of its own (it is then not in the terminal's
foreground group: it should not read the terminal), and no process of that
group outlives the hold: when CMD exits, whatever it left running in its
group gets SIGKILL, and disco releases the lock only once none of it runs.
If disco itself dies, even of SIGKILL, a watcher process (disco itself,
started beside CMD) kills the group. A process that leaves the group
(setsid, a daemon that detaches) escapes this and runs on without the hold.
Linux only.

The holder and its waiters carry --value (default HOST:PID, this host's name
and disco's process id), which 'disco status NAME' shows.

The lock excludes disco's library (etcdio.NewLock), etcd's concurrency.Mutex
and 'etcdctl lock' on the same NAME (they ignore the value); on ZooKeeper,
Curator's InterProcessMutex.`,
		Args: func(cmd *cobra.Command, a []string) error { return cmdArgs(cmd, a, "NAME") },
		RunE: runE(func(cmd *cobra.Command, a []string) error {
			if err := g.checkName(a[0]); err != nil {
				return err
			}
			if err := checkGrace(cmd, grace); err != nil {
				return err
			}
			if err := checkStopAt(cmd, stopAt); err != nil {
				return err
			}
			if !cmd.Flags().Changed("value") {
				value = ownerValue()
			}
			return runLock(cmd.Context(), g, a[0], value, a[1:], grace, stopAt)
		}),
	}
	cmd.Flags().DurationVar(&grace, "grace", 5*time.Second, "how long CMD has to exit after SIGTERM before SIGKILL (at suspended, cut to end before the lease may expire)")
	cmd.Flags().StringVar(&value, "value", "", "what the hold carries, shown by 'disco status' (default HOST:PID)")
	cmd.Flags().StringVar(&stopAt, "stop-at", stopAtSuspended, "when to stop CMD: suspended (the lease went unconfirmed; CMD is gone before it may expire) or lost")
	return cmd
}

// cmdArgs checks the arguments of a command that runs CMD: the arguments
// names (NAME, or NAME VALUE), then "--", then CMD and its arguments. It
// says what is missing in the command's own words.
func cmdArgs(cmd *cobra.Command, a []string, names ...string) error {
	n, dash := len(names), cmd.ArgsLenAtDash()
	before := len(a)
	if dash >= 0 {
		before = dash
	}
	switch {
	case before < n:
		return argsErr(cmd, "no %s", names[before])
	case before > n && dash < 0:
		return argsErr(cmd, "put -- before CMD (%s)", cmd.Use)
	case before > n:
		return argsErr(cmd, "%s before --, then CMD; got %d arguments before --: %s", strings.Join(names, " "), before, strings.Join(a[:before], " "))
	case len(a) == n:
		return argsErr(cmd, "no CMD after --")
	}
	return nil
}

// ownerValue is a hold's value by default: this host's name and disco's
// process id.
func ownerValue() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

func runLock(ctx context.Context, g *globals, name, value string, argv []string, grace time.Duration, stopAt string) error {
	sup := &supervisor{what: "lock " + name, release: "release", argv: argv, grace: grace, stopAt: stopAt, stdin: g.stdin, stdout: g.stdout, stderr: g.stderr}
	waitCtx, stop := sup.watchSignals(ctx)
	defer stop()
	b, err := g.dial(waitCtx)
	if err != nil {
		return orInterrupted(sup, "the service", err)
	}
	cctx, cancel := g.commandCtx(waitCtx)
	l, err := b.newLock(cctx, name, value, stopAt == stopAtSuspended)
	err = timedOut(cctx, err) // before cancel, which would hide a deadline just passed
	cancel()
	if err != nil {
		b.close()
		return orInterrupted(sup, b.name(), err)
	}
	defer g.closeBounded(func() { l.Close() }, b)
	g.logf("lock %s: %s", name, b.where(name))
	err = lock.Do(waitCtx, withWaitingLog(l, g.commandTimeout, func() { g.logf("waiting for lock %s", name) }), func(ctx context.Context, gr lock.Grant) error {
		g.logf("locked %s: token %v, key %s; running %s", name, gr.FencingToken, gr.Key, argv[0])
		return sup.run(ctx, name, gr.FencingToken)
	})
	if err == nil {
		g.logf("released %s", name)
	}
	return sup.outcome(err)
}

// orInterrupted returns the interruption if a signal ended the wait, else err.
func orInterrupted(sup *supervisor, what string, err error) error {
	if ie := sup.interrupted(what); ie != nil {
		return ie
	}
	return err
}

// withWaitingLog returns l with a Lock that tries first and calls waiting
// only when the lock is taken and it must wait: so that -v says "waiting"
// only while disco waits; and with a Release bounded by release, the
// command timeout (lock.Do allows a release 10s), so that a store out of
// reach does not keep disco after CMD exited (a release that runs out of it
// says so, naming the flag). What lock.Do reads of a lock
// besides its lock.Service methods (its session's suspension, its own
// setting of cancel at Suspended, its grant) stays the backend's: every
// backend's lock shows driver.Face. A lock that does not is returned as it
// is.
func withWaitingLog(l lock.Service, release time.Duration, waiting func()) lock.Service {
	fl, ok := l.(faceLock)
	if !ok {
		return l
	}
	return tryFirst{fl, release, waiting}
}

// faceLock is a backend's lock: its lock.Service and its driver.Face.
type faceLock interface {
	lock.Service
	driver.Face
}

// tryFirst is withWaitingLog's lock.
type tryFirst struct {
	faceLock
	release time.Duration // bounds Release
	waiting func()
}

func (t tryFirst) Release(ctx context.Context, gr lock.Grant) error {
	ctx, cancel := withCommandTimeout(ctx, t.release)
	defer cancel()
	return timedOut(ctx, t.faceLock.Release(ctx, gr))
}

func (t tryFirst) Lock(ctx context.Context) (lock.Grant, error) {
	gr, err := t.TryLock(ctx)
	if !errors.Is(err, lock.ErrLockTaken) {
		return gr, err
	}
	t.waiting()
	return t.faceLock.Lock(ctx)
}
