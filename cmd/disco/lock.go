package main

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/ahrtr/disco/primitives/lock"
)

func newLockCmd(g *globals) *cobra.Command {
	var grace time.Duration
	var stopAt string
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
refused. Either way disco exits with status 3. SIGINT and SIGTERM sent to disco are passed
on to CMD; before CMD starts they end the wait (status 128+signal).

CMD runs in a process group of its own (it is then not in the terminal's
foreground group: it should not read the terminal), and no process of that
group outlives the hold: when CMD exits, whatever it left running in its
group gets SIGKILL, and disco releases the lock only once none of it runs.
If disco itself dies, even of SIGKILL, a watcher process (disco itself,
started beside CMD) kills the group. A process that leaves the group
(setsid, a daemon that detaches) escapes this and runs on without the hold.
Linux only.

The lock excludes disco's library (etcdio.NewLock), etcd's concurrency.Mutex
and 'etcdctl lock' on the same NAME.`,
		Args: args(cobra.MinimumNArgs(2)),
		RunE: runE(func(cmd *cobra.Command, a []string) error {
			if err := needDash(cmd, 1); err != nil {
				return err
			}
			if err := checkName(a[0]); err != nil {
				return err
			}
			if err := checkStopAt(stopAt); err != nil {
				return err
			}
			return runLock(cmd.Context(), g, a[0], a[1:], grace, stopAt)
		}),
	}
	cmd.Flags().DurationVar(&grace, "grace", 5*time.Second, "how long CMD has to exit after SIGTERM before SIGKILL (at suspended, cut to end before the lease may expire)")
	cmd.Flags().StringVar(&stopAt, "stop-at", stopAtSuspended, "when to stop CMD: suspended (the lease went unconfirmed; CMD is gone before it may expire) or lost")
	return cmd
}

// needDash requires "--" right after the first n arguments, so that CMD's
// own flags are never taken for disco's.
func needDash(cmd *cobra.Command, n int) error {
	if cmd.ArgsLenAtDash() != n {
		return usageErr(errors.New(cmd.Name() + ": put -- before CMD: " + cmd.Use))
	}
	return nil
}

func runLock(ctx context.Context, g *globals, name string, argv []string, grace time.Duration, stopAt string) error {
	sup := &supervisor{what: "lock " + name, argv: argv, grace: grace, stopAt: stopAt, stdin: g.stdin, stdout: g.stdout, stderr: g.stderr}
	waitCtx, stop := sup.watchSignals(ctx)
	defer stop()
	b, err := g.dial(waitCtx)
	if err != nil {
		return orInterrupted(sup, "the service", err)
	}
	defer b.close()
	cctx, cancel := g.commandCtx(waitCtx)
	l, err := b.newLock(cctx, name, stopAt == stopAtSuspended)
	cancel()
	if err != nil {
		return orInterrupted(sup, b.name(), err)
	}
	defer l.Close()
	g.logf("lock %s: %s", name, b.where(name))
	g.logf("waiting for lock %s", name)
	err = lock.Do(waitCtx, l, func(ctx context.Context, gr lock.Grant) error {
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
