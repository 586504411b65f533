// Package story is the plumbing the examples share, so that each example's
// main.go holds only its story: starting (or choosing) etcd, opening one etcd
// client per party, narrating, simulating a pause by revoking a lease,
// waiting for Lost or for a waiter's key, a guarded in-memory resource, and
// the main wrapper that turns a failed story into "FAILED" and exit code 1.
package story

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/primitives"
)

// Main is the whole main of an example: it calls run with a context that an
// interrupt cancels and, if run fails, prints "<name> FAILED: <error>" to
// stderr and exits 1.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		stop()
		fmt.Fprintln(os.Stderr, name+" FAILED:", err)
		os.Exit(1)
	}
}

// RunMain is the whole main of a story that needs only etcd: Main, then
// WithEtcd, then run on stdout.
func RunMain(name string, line EtcdLine, run func(ctx context.Context, out io.Writer, endpoints []string) error) {
	Main(name, func(ctx context.Context) error {
		return WithEtcd(ctx, os.Stdout, line, func(ctx context.Context, etcd Etcd) error {
			return run(ctx, os.Stdout, etcd.Endpoints)
		})
	})
}

// Etcd is the etcd cluster a story runs against.
type Etcd struct {
	Endpoints []string
	// Embedded: the cluster is a single member started by this process, not
	// one named by ETCD_ENDPOINTS.
	Embedded bool
}

// EtcdLine is how WithEtcd describes an embedded member.
type EtcdLine int

const (
	// ShowAddress names the embedded member's address.
	ShowAddress EtcdLine = iota
	// HideAddress does not.
	HideAddress
)

// WithEtcd starts a single embedded etcd member, or uses the cluster that
// ETCD_ENDPOINTS names (embedded.StartOrEnv), says which on out, and calls
// body with ctx limited to a minute. The embedded member stops when body
// returns.
func WithEtcd(ctx context.Context, out io.Writer, line EtcdLine, body func(ctx context.Context, etcd Etcd) error) error {
	endpoints, stopEtcd, err := embedded.StartOrEnv()
	if err != nil {
		return fmt.Errorf("starting embedded etcd: %w", err)
	}
	defer stopEtcd()
	etcd := Etcd{Endpoints: endpoints, Embedded: len(embedded.EndpointsFromEnv()) == 0}
	eps := strings.Join(endpoints, ",")
	switch {
	case !etcd.Embedded:
		fmt.Fprintf(out, "etcd: %s (from %s)\n", eps, embedded.EnvEndpoints)
	case line == ShowAddress:
		fmt.Fprintf(out, "etcd: embedded single member at %s (set %s to use a real cluster)\n", eps, embedded.EnvEndpoints)
	default:
		fmt.Fprintf(out, "etcd: embedded single member (set %s to use a real cluster)\n", embedded.EnvEndpoints)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return body(ctx, etcd)
}

// Clients opens etcd clients for the parties of a story (each stands for a
// separate process, so each has its own client and its own lease) and
// closes them all at the end.
type Clients struct {
	endpoints []string
	open      []*clientv3.Client
}

// NewClients returns a Clients for the cluster at endpoints. Close it.
func NewClients(endpoints []string) *Clients { return &Clients{endpoints: endpoints} }

// New opens one more client.
func (c *Clients) New() (*clientv3.Client, error) {
	cli, err := embedded.NewClient(c.endpoints)
	if err != nil {
		return nil, err
	}
	c.open = append(c.open, cli)
	return cli, nil
}

// NewN opens n more clients.
func (c *Clients) NewN(n int) ([]*clientv3.Client, error) {
	clis := make([]*clientv3.Client, n)
	for i := range clis {
		var err error
		if clis[i], err = c.New(); err != nil {
			return nil, err
		}
	}
	return clis, nil
}

// Close closes every client opened so far.
func (c *Clients) Close() {
	for _, cli := range c.open {
		_ = cli.Close()
	}
	c.open = nil
}

// Narrator returns the story's voice on out: say writes one line, step a
// blank line and then a step's heading.
func Narrator(out io.Writer) (say, step func(format string, args ...any)) {
	say = func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	step = func(format string, args ...any) {
		say("")
		say(format, args...)
	}
	return say, step
}

// Revoke ends who's lease at once, from the world's client: what its expiry
// would do after a pause longer than its TTL, without waiting for it.
func Revoke(ctx context.Context, world *clientv3.Client, who string, lease int64) error {
	if _, err := world.Revoke(ctx, clientv3.LeaseID(lease)); err != nil {
		return fmt.Errorf("revoking %s's lease: %w", who, err)
	}
	return nil
}

// Pause simulates a pause of who (a long garbage-collection pause, say)
// past its lease's TTL: Revoke ends the lease, and Pause waits until who's
// events report Lost. A paused process would notice nothing; the story only
// looks at Lost to know that the hold is over.
func Pause(ctx context.Context, world *clientv3.Client, who string, lease int64, events <-chan primitives.Event) (primitives.Lost, error) {
	if err := Revoke(ctx, world, who, lease); err != nil {
		return primitives.Lost{}, err
	}
	lost, err := WaitLost(ctx, events)
	if err != nil {
		return lost, fmt.Errorf("%s: %w", who, err)
	}
	return lost, nil
}

// WaitLost returns the first Lost event on events, skipping the Acquired
// before it.
func WaitLost(ctx context.Context, events <-chan primitives.Event) (primitives.Lost, error) {
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return primitives.Lost{}, errors.New("event stream ended without a Lost event")
			}
			if l, ok := e.(primitives.Lost); ok {
				return l, nil
			}
		case <-ctx.Done():
			return primitives.Lost{}, fmt.Errorf("waiting for the Lost event: %w", ctx.Err())
		}
	}
}

// WaitFor polls cond until it holds, fails, or ctx ends. It is a poll with a
// deadline, used where etcd's state is the only sign of progress (a waiter
// has no event of its own until it acquires).
func WaitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
}

// WaitForKeys waits until exactly n keys are under prefix+"/": the sign that
// a waiter has queued. what names the keys, as in "%d <what>".
func WaitForKeys(ctx context.Context, cli *clientv3.Client, prefix string, n int64, what string) error {
	return WaitFor(ctx, fmt.Sprintf("%d %s", n, what), func() (bool, error) {
		resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == n, err
	})
}

// Prefix returns a fresh key prefix for one run of the example at path, so
// that runs against one cluster do not meet.
func Prefix(path string) string {
	return fmt.Sprintf("/disco-examples/%s/%d", path, time.Now().UnixNano())
}
