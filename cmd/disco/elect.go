package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
)

func newElectCmd(g *globals) *cobra.Command {
	var grace time.Duration
	var stopAt string
	cmd := &cobra.Command{
		Use:   "elect NAME VALUE [-- CMD [ARGS...]]",
		Short: "Campaign in the election NAME; run CMD while leading",
		Long: `Campaign in the election NAME with VALUE.

With CMD: once leading, run CMD with FENCING_TOKEN (the term's token, its
key's creation revision) and FENCING_SCOPE (NAME) in its environment; when CMD
exits, resign and exit with CMD's status. When the term's lease goes
unconfirmed while CMD runs (Suspended), CMD's process group gets SIGTERM,
then SIGKILL after --grace or just before the lease may expire, whichever is
first; with --stop-at=lost only once leadership is lost, SIGKILL after
--grace. Either way disco then exits with status 3 (see 'disco lock'). Signals and process groups are handled as by 'disco
lock': no process of CMD's group outlives the term (disco resigns only once
none runs), except one that left the group (setsid).

Without CMD: print each term won (token, key) and campaign again after a
loss, until interrupted (SIGINT, SIGTERM or SIGHUP; status 0, also while
connecting); then resign (status 1, saying so, if the resignation
fails: the term then lasts until its lease expires). Should the service be out of reach after a loss,
disco says so on stderr and tries again, with pauses growing to the TTL;
only a first connection that fails ends it.

The election agrees with etcd's concurrency.Election and 'etcdctl elect' on
the same NAME about who leads.`,
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) == 2 && cmd.ArgsLenAtDash() < 0 {
				return nil // campaigns without CMD
			}
			return cmdArgs(cmd, a, "NAME", "VALUE")
		},
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
			if len(a) == 2 {
				return runCampaigns(cmd.Context(), g, a[0], a[1])
			}
			return runElect(cmd.Context(), g, a[0], a[1], a[2:], grace, stopAt)
		}),
	}
	cmd.Flags().DurationVar(&grace, "grace", 5*time.Second, "how long CMD has to exit after SIGTERM before SIGKILL (at suspended, cut to end before the lease may expire)")
	cmd.Flags().StringVar(&stopAt, "stop-at", stopAtSuspended, "when to stop CMD: suspended (the lease went unconfirmed; CMD is gone before it may expire) or lost")
	return cmd
}

// newElection connects and makes a candidate in NAME.
func newElection(ctx context.Context, g *globals, name string, cancelOnSuspend bool) (election.Service, func(), error) {
	b, err := g.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := g.commandCtx(ctx)
	defer cancel()
	e, err := b.newElection(cctx, name, cancelOnSuspend)
	if err != nil {
		b.close()
		return nil, nil, timedOut(cctx, err)
	}
	g.logf("election %s: %s", name, b.where(name))
	return withBoundedResign(e, g.commandTimeout), func() { g.closeBounded(func() { e.Close() }, b) }, nil
}

// withBoundedResign returns e with its resignations bounded by resign, the
// command timeout (election.Lead allows a resignation 10s), so that a store
// out of reach does not keep disco after CMD exited or at Ctrl-C (one that
// runs out of it says so, naming the flag). What
// election.Lead reads of e besides its election.Service methods stays the
// backend's: every backend's election shows driver.Face and resigns a
// given term. An election that does not is returned as it is.
func withBoundedResign(e election.Service, resign time.Duration) election.Service {
	fe, ok := e.(faceElection)
	if !ok {
		return e
	}
	return boundedResign{fe, resign}
}

// faceElection is a backend's election: its election.Service, its
// election.TermResigner and its driver.Face.
type faceElection interface {
	election.Service
	election.TermResigner
	driver.Face
}

// boundedResign is withBoundedResign's election.
type boundedResign struct {
	faceElection
	resign time.Duration
}

func (b boundedResign) Resign(ctx context.Context) error {
	ctx, cancel := withCommandTimeout(ctx, b.resign)
	defer cancel()
	return timedOut(ctx, b.faceElection.Resign(ctx))
}

func (b boundedResign) ResignTerm(ctx context.Context, term election.Leadership) error {
	ctx, cancel := withCommandTimeout(ctx, b.resign)
	defer cancel()
	return timedOut(ctx, b.faceElection.ResignTerm(ctx, term))
}

func runElect(ctx context.Context, g *globals, name, value string, argv []string, grace time.Duration, stopAt string) error {
	sup := &supervisor{what: "leadership of " + name, release: "resignation", argv: argv, grace: grace, stopAt: stopAt, stdin: g.stdin, stdout: g.stdout, stderr: g.stderr}
	waitCtx, stop := sup.watchSignals(ctx)
	defer stop()
	e, closeAll, err := newElection(waitCtx, g, name, stopAt == stopAtSuspended)
	if err != nil {
		return orInterrupted(sup, "the service", err)
	}
	defer closeAll()
	g.logf("campaigning in %s", name)
	err = election.Lead(waitCtx, e, value, func(ctx context.Context, l election.Leadership) error {
		g.logf("leading %s: token %v, key %s; running %s", name, l.FencingToken, l.Key, argv[0])
		return sup.run(ctx, name, l.FencingToken)
	})
	if err == nil {
		g.logf("resigned %s", name)
	}
	return sup.outcome(err)
}

// runCampaigns campaigns, prints each term won and campaigns again after a
// loss, until ctx ends or a signal comes; then it resigns. When the
// session is gone it starts a new one after a pause, and if the service
// cannot be reached it says so on stderr and tries again, with a longer
// pause up to the TTL; only a first connection that fails (or bad input)
// ends it. An interruption, also while connecting, ends it normally.
func runCampaigns(ctx context.Context, g *globals, name, value string) error {
	ctx, stop := notifyContext(ctx)
	defer stop()
	out := newPrinter(g)
	for retry, first := time.Duration(0), true; ; first = false {
		connected, err := campaignOnce(ctx, g, name, value, out)
		var ee *exitError
		switch {
		case ctx.Err() != nil && errors.Is(err, errNotResigned):
			return err
		case ctx.Err() != nil:
			return nil
		case !connected && (first || errors.As(err, &ee) || errors.Is(err, primitives.ErrInvalidArgument)):
			return err // the service unreachable at the start, or bad usage
		case connected:
			retry = 0 // the session is gone: campaignOnce told why
		}
		retry = min(max(2*retry, 100*time.Millisecond), g.ttl)
		if !connected {
			fmt.Fprintf(g.stderr, "disco: campaigning in %s: %v; again in %v\n", name, err, retry)
		}
		if !ctxtime.Sleep(ctx, retry) {
			return nil
		}
	}
}

// errNotResigned ends elect without CMD when its resignation failed.
var errNotResigned = errors.New("did not resign")

// campaignOnce runs one candidate until its session is gone or ctx ends;
// connected says whether it got a session.
func campaignOnce(ctx context.Context, g *globals, name, value string, out *printer) (connected bool, err error) {
	e, closeAll, err := newElection(ctx, g, name, false)
	if err != nil {
		return false, err
	}
	defer closeAll()
	for {
		leading := false
		err := election.Lead(ctx, e, value, func(ctx context.Context, l election.Leadership) error {
			leading = true
			out.event(termEvent{Event: "leading", Name: name, Key: l.Key, Value: l.Value, Token: int64(l.FencingToken), Lease: leaseHex(l.LeaseID)})
			<-ctx.Done()
			return nil
		})
		if ctx.Err() != nil {
			switch {
			case !leading:
			case err != nil:
				// The resignation failed (the service out of reach):
				// the term is not over, whatever ended it here.
				return true, fmt.Errorf("%w %s: %w; its term lasts until its lease expires", errNotResigned, name, err)
			default:
				out.event(termEvent{Event: "resigned", Name: name})
			}
			return true, nil
		}
		if err == nil {
			err = errors.New("term ended")
		}
		if leading {
			out.event(termEvent{Event: "lost", Name: name, Error: errString(err)})
		} else {
			// No term was had, so none was lost: the campaign itself
			// failed (its key deleted, its session gone).
			fmt.Fprintf(g.stderr, "disco: campaign in %s ended before it led: %v\n", name, err)
		}
		if e.Err() != nil {
			return true, err // the session is gone
		}
		// The key alone was lost: campaign again on the same session.
	}
}

// termEvent is one line of 'disco elect' without CMD.
type termEvent struct {
	Event string `json:"event"` // leading, lost, resigned
	Name  string `json:"name"`
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	Token int64  `json:"token,omitempty"`
	Lease string `json:"lease,omitempty"`
	Error string `json:"error,omitempty"`
}

func (t termEvent) String() string {
	switch t.Event {
	case "leading":
		return fmt.Sprintf("leading %s: token %d, key %s, value %q, lease %s", t.Name, t.Token, t.Key, t.Value, t.Lease)
	case "lost":
		return fmt.Sprintf("lost %s: %s", t.Name, t.Error)
	}
	return t.Event + " " + t.Name
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
