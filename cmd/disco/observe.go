package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ahrtr/disco/primitives/election"
)

func newObserveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "observe NAME",
		Short: "Print each change of leader of the election NAME",
		Long: `Print the leader of the election NAME, then one line (with --json one JSON
object) per change of leader, including "no leader", until interrupted.
A leader's token is its key's creation revision.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: runE(func(cmd *cobra.Command, a []string) error {
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

func runObserve(ctx context.Context, g *globals, name string) error {
	ctx, stop := notifyContext(ctx)
	defer stop()
	e, closeAll, err := newElection(ctx, g, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer closeAll()
	out := newPrinter(g)
	var last *leaderLine
	for l := range e.Observe(ctx) {
		line := toLine(name, l)
		if last != nil && *last == line {
			continue
		}
		last = &line
		out.event(line)
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("observing %s: %w", name, e.Err())
}
