// Command basic tells the story of a leader election with fencing tokens.
//
// Three candidates A, B and C (each its own etcd client, as separate
// processes would be) campaign with election.Lead; one leads, the others
// wait in line. A passive observer, an election service that never
// campaigns, follows the leadership with Observe. Each leader writes to a
// resource behind a fencing guard with its term's token.
//
// The leader then dies twice: A's service is closed (a clean shutdown), and
// B's lease is revoked from another client (a crash or a long pause, without
// waiting for the TTL). Each time the next candidate takes over with a higher
// token, the observer sees it, and the guard rejects the previous leader's
// token. Finally C steps down and the observer sees that nobody leads.
//
// Run it with
//
//	go run ./examples/election/basic
//
// It starts an embedded etcd member; set ETCD_ENDPOINTS to use a real
// cluster. It exits 0 only if the story ended as promised.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

func main() { story.RunMain("election example", story.HideAddress, run) }

// run tells the story against the etcd cluster at endpoints and returns an
// error unless it ended as promised.
func run(ctx context.Context, out io.Writer, endpoints []string) error {
	_, err := tell(ctx, out, endpoints)
	return err
}

// ttl is every candidate's lease time to live.
const ttl = 5 * time.Second

// outcome is what the story observed, for the test to check.
type outcome struct {
	Leaders  []election.Leadership // each term, in the order they began
	Observed []election.Leadership // each leader the observer reported, in order
	// Rejected holds the guard's answer to each former leader's token once
	// its successor had written.
	Rejected []error
	// LeadErrs is what each candidate's election.Lead returned, by name.
	LeadErrs map[string]error
	// NoLeaderAtEnd: the observer saw that nobody leads after C stepped down.
	NoLeaderAtEnd bool
}

// candidate is one process that wants to lead.
type candidate struct {
	name   string
	svc    election.Service
	stop   context.CancelFunc // ends its Lead: it resigns
	done   chan struct{}      // closed when its Lead has returned
	err    error              // what its Lead returned, once done is closed
	killed bool               // the story ended its term on purpose
}

// term is a candidate's report that it leads.
type term struct {
	c *candidate
	l election.Leadership
}

func tell(ctx context.Context, out io.Writer, endpoints []string) (o outcome, err error) {
	say, step := story.Narrator(out)
	prefix := story.Prefix("election/basic")
	o.LeadErrs = make(map[string]error)

	clients := story.NewClients(endpoints)
	defer clients.Close()
	// world plays everything around the candidates: it looks at etcd's keys
	// and revokes B's lease.
	world, err := clients.New()
	if err != nil {
		return o, err
	}

	// The observer never campaigns; it only watches.
	obsCli, err := clients.New()
	if err != nil {
		return o, err
	}
	observer, err := etcdio.NewElection(obsCli, prefix)
	if err != nil {
		return o, err
	}
	defer observer.Close()
	obsCtx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	observed := observer.Observe(obsCtx)
	// awaitObserved prints what the observer reports until it reports the
	// leader whose key is want ("" for nobody). Observe coalesces changes a
	// slow reader missed, so the story waits for each leader here before
	// it moves on.
	awaitObserved := func(want string) error {
		for {
			select {
			case l, ok := <-observed:
				if !ok {
					return errors.New("observer: Observe ended early")
				}
				if l.Key == "" {
					say("   observer: nobody leads")
				} else {
					o.Observed = append(o.Observed, l)
					say("   observer: %s leads (token %d)", l.Value, l.Token())
				}
				if l.Key == want {
					return nil
				}
			case <-ctx.Done():
				return fmt.Errorf("waiting for the observer: %w", ctx.Err())
			}
		}
	}

	res := story.NewResource("")
	leads := make(chan term, 3)
	ended := make(chan *candidate, 3) // each candidate, once its Lead returned
	var cands []*candidate
	defer func() {
		for _, c := range cands {
			c.stop()
			_ = c.svc.Close() // fails for A (closed already) and B (lease gone)
			<-c.done
		}
	}()
	// campaign starts a candidate that leads with election.Lead until its
	// Lead context ends or its term is lost.
	campaign := func(name string) (*candidate, error) {
		cli, err := clients.New()
		if err != nil {
			return nil, err
		}
		svc, err := etcdio.NewElection(cli, prefix, etcdio.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		lctx, stop := context.WithCancel(ctx)
		c := &candidate{name: name, svc: svc, stop: stop, done: make(chan struct{})}
		cands = append(cands, c)
		go func() {
			defer func() { ended <- c }()
			defer close(c.done)
			c.err = election.Lead(lctx, svc, name, func(ctx context.Context, l election.Leadership) error {
				leads <- term{c, l}
				<-ctx.Done() // lead until stopped or the term is lost
				return nil
			})
		}()
		return c, nil
	}
	nextLeader := func() (term, error) {
		for {
			select {
			case t := <-leads:
				o.Leaders = append(o.Leaders, t.l)
				return t, nil
			case c := <-ended:
				if !c.killed {
					return term{}, fmt.Errorf("%s's Lead returned unexpectedly: %v", c.name, c.err)
				}
			case <-ctx.Done():
				return term{}, fmt.Errorf("waiting for a leader: %w", ctx.Err())
			}
		}
	}
	candidateKeys := func(n int64) error {
		return story.WaitForKeys(ctx, world, prefix, n, "candidates' keys")
	}
	// leadResult waits for what c's election.Lead returned.
	leadResult := func(c *candidate) error {
		select {
		case <-c.done:
			o.LeadErrs[c.name] = c.err
			return c.err
		case <-ctx.Done():
			return fmt.Errorf("%s's Lead has not returned: %w", c.name, ctx.Err())
		}
	}
	// handOver checks that the new leader's write is accepted and that the
	// former leader's token is rejected from now on.
	handOver := func(prev, now term) error {
		if now.l.Token() <= prev.l.Token() {
			return fmt.Errorf("%s's token %d is not above %s's %d", now.c.name, now.l.Token(), prev.c.name, prev.l.Token())
		}
		v := "config by " + now.c.name
		if err := res.Write(ctx, now.l.Token(), v); err != nil {
			return fmt.Errorf("%s: write: %w", now.c.name, err)
		}
		say("   %s writes %q with token %d: accepted", now.c.name, v, now.l.Token())
		err := res.Write(ctx, prev.l.Token(), "late config by "+prev.c.name)
		o.Rejected = append(o.Rejected, err)
		if !errors.Is(err, fencing.ErrTokenStale) {
			return fmt.Errorf("%s's old token %d after the handover: %v, want it rejected as stale", prev.c.name, prev.l.Token(), err)
		}
		say("   a late write with %s's old token %d: REJECTED (%v)", prev.c.name, prev.l.Token(), err)
		return nil
	}

	say("observer: an election service that never campaigns, following Observe")
	if err := awaitObserved(""); err != nil {
		return o, err
	}

	// 1. A leads; B and C wait in line.
	step("1. A, B and C campaign, in that order")
	a, err := campaign("A")
	if err != nil {
		return o, err
	}
	ta, err := nextLeader()
	if err != nil {
		return o, err
	}
	if ta.c != a {
		return o, fmt.Errorf("%s leads, want A", ta.c.name)
	}
	say("   A leads: token %d", ta.l.Token())
	if err := awaitObserved(ta.l.Key); err != nil {
		return o, err
	}
	if _, err := campaign("B"); err != nil {
		return o, err
	}
	if err := candidateKeys(2); err != nil {
		return o, err
	}
	if _, err := campaign("C"); err != nil {
		return o, err
	}
	if err := candidateKeys(3); err != nil {
		return o, err
	}
	say("   B and C campaign too and wait in line behind A")
	if err := res.Write(ctx, ta.l.Token(), "config by A"); err != nil {
		return o, fmt.Errorf("A: write: %w", err)
	}
	say("   A writes %q with token %d: accepted", "config by A", ta.l.Token())

	// 2. A shuts down.
	step("2. A shuts down: its election service is closed")
	a.killed = true
	if err := a.svc.Close(); err != nil {
		return o, fmt.Errorf("A: close: %w", err)
	}
	if err := leadResult(a); !errors.Is(err, primitives.ErrClosed) {
		return o, fmt.Errorf("A's Lead returned %v, want an error wrapping ErrClosed", err)
	}
	say("   A's election.Lead returns: its service is closed")
	tb, err := nextLeader()
	if err != nil {
		return o, err
	}
	say("   %s leads now: token %d", tb.c.name, tb.l.Token())
	if err := awaitObserved(tb.l.Key); err != nil {
		return o, err
	}
	if err := handOver(ta, tb); err != nil {
		return o, err
	}

	// 3. B crashes.
	step("3. %s crashes (or stalls) and its lease ends", tb.c.name)
	tb.c.killed = true
	if err := story.Revoke(ctx, world, tb.c.name, tb.l.LeaseID); err != nil {
		return o, err
	}
	say("   (simulated: another client revokes %s's lease instead of waiting %v)", tb.c.name, ttl)
	if err := leadResult(tb.c); !errors.Is(err, primitives.ErrLost) {
		return o, fmt.Errorf("%s's Lead returned %v, want an error wrapping ErrLost", tb.c.name, err)
	}
	say("   %s's election.Lead returns: leadership lost", tb.c.name)
	tc, err := nextLeader()
	if err != nil {
		return o, err
	}
	say("   %s leads now: token %d", tc.c.name, tc.l.Token())
	if err := awaitObserved(tc.l.Key); err != nil {
		return o, err
	}
	if err := handOver(tb, tc); err != nil {
		return o, err
	}

	// 4. C steps down.
	step("4. %s steps down: its Lead context ends, so Lead resigns", tc.c.name)
	tc.c.killed = true
	tc.c.stop()
	if err := leadResult(tc.c); err != nil {
		return o, fmt.Errorf("%s's Lead returned %v, want nil after resigning", tc.c.name, err)
	}
	say("   %s's election.Lead returns nil: it resigned cleanly", tc.c.name)
	if err := awaitObserved(""); err != nil {
		return o, err
	}
	o.NoLeaderAtEnd = true

	step("Outcome: the observer saw every leader in order (%s), each handover", names(o.Observed))
	say("raised the token, and every former leader's token was rejected.")
	say("The story ended as promised.")
	return o, nil
}

func names(ls []election.Leadership) string {
	var s []string
	for _, l := range ls {
		s = append(s, l.Value)
	}
	return strings.Join(s, ", then ")
}
