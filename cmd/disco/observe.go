package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/primitives/election"
)

func newObserveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "observe NAME",
		Short: "Print each change of leader of the election NAME",
		Long: `Print the leader of the election NAME, then one line (with --json one JSON
object) per change of leader, including "no leader", until interrupted.
A leader's token is its key's creation revision. observe holds a lease of
its own but writes no key; if that lease is lost (etcd out of reach for the
TTL), it says so on stderr and observes again.`,
		Args: oneName,
		RunE: runE(func(cmd *cobra.Command, a []string) error {
			if err := g.checkName(a[0]); err != nil {
				return err
			}
			return runObserve(cmd.Context(), g, a[0])
		}),
	}
}

// leaderLine is one line of 'disco observe'.
type leaderLine struct {
	Name   string `json:"name"`
	Leader bool   `json:"leader"` // false: nobody leads
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	Token  int64  `json:"token,omitempty"`
	Lease  string `json:"lease,omitempty"`
}

func (l leaderLine) String() string {
	if !l.Leader {
		return "no leader of " + l.Name
	}
	return fmt.Sprintf("leader of %s: value %q, token %d, key %s, lease %s", l.Name, l.Value, l.Token, l.Key, l.Lease)
}

func toLine(name string, l election.Leadership) leaderLine {
	if l.Key == "" {
		return leaderLine{Name: name}
	}
	return leaderLine{Name: name, Leader: true, Key: l.Key, Value: l.Value, Token: int64(l.FencingToken), Lease: leaseHex(l.LeaseID)}
}

// runObserve prints leaders until ctx ends or a signal comes. If its
// session ends (etcd was out of reach for the TTL), it says so on stderr
// and observes again after a pause; only a first connection that fails
// ends it.
func runObserve(ctx context.Context, g *globals, name string) error {
	ctx, stop := notifyContext(ctx)
	defer stop()
	out := newPrinter(g)
	var last *leaderLine
	for retry, first := time.Duration(0), true; ; first = false {
		connected, err := observeOnce(ctx, g, name, out, &last)
		switch {
		case ctx.Err() != nil:
			return nil
		case first && !connected:
			return err
		case connected:
			retry = 0
		}
		retry = min(max(2*retry, 100*time.Millisecond), g.ttl)
		fmt.Fprintf(g.stderr, "disco: observing %s: %v; again in %v\n", name, err, retry)
		if !ctxtime.Sleep(ctx, retry) {
			return nil
		}
	}
}

// observeOnce prints each change of leader on one session until it ends,
// skipping a state equal to *last; connected says whether it got a session.
func observeOnce(ctx context.Context, g *globals, name string, out *printer, last **leaderLine) (connected bool, err error) {
	e, closeAll, err := newElection(ctx, g, name, false)
	if err != nil {
		return false, err
	}
	defer closeAll()
	for l := range e.Observe(ctx) {
		line := toLine(name, l)
		if *last != nil && **last == line {
			continue
		}
		*last = &line
		out.event(line)
	}
	return true, e.Err()
}
