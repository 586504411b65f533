package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/primitives"
)

// Exit statuses of disco's own (CMD's status passes through otherwise).
const (
	exitFailure  = 1   // disco's own error: etcd unreachable, a request failed
	exitUsage    = 2   // bad flags or arguments
	exitLost     = 3   // the hold was lost or in doubt while CMD ran or before it started, or found lost by its release
	exitNoExec   = 126 // CMD exists but could not be started
	exitNotFound = 127 // CMD not found
)

// defaultEndpoint is used when neither --endpoints nor DISCO_ENDPOINTS nor
// ETCD_ENDPOINTS is set.
const defaultEndpoint = "127.0.0.1:2379"

// envEndpoints names the environment variable that sets the default
// --endpoints, of any service; ETCD_ENDPOINTS is read when it is unset.
const envEndpoints = "DISCO_ENDPOINTS"

// endpointsFromEnv returns DISCO_ENDPOINTS's endpoints, else
// ETCD_ENDPOINTS's.
func endpointsFromEnv() []string {
	var eps []string
	for _, ep := range strings.Split(os.Getenv(envEndpoints), ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	if len(eps) > 0 {
		return eps
	}
	return embedded.EndpointsFromEnv()
}

// exitError ends disco with code, printing err (if not nil) on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErr marks err as bad usage (exit status 2).
func usageErr(err error) error { return &exitError{code: exitUsage, err: err} }

// globals are the flags every command shares, and where output goes.
type globals struct {
	endpoints      []string
	ttl            time.Duration
	json           bool
	verbose        bool
	dialTimeout    time.Duration
	commandTimeout time.Duration

	stdin          io.Reader
	stdout, stderr io.Writer
}

// run parses args, runs the command and returns disco's exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors cobra found while parsing (an unknown command, say).
		ee = &exitError{code: exitUsage, err: err}
	}
	if ee.err != nil {
		fmt.Fprintln(stderr, "disco:", ee.err)
		if ee.code == exitUsage {
			fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return ee.code
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "disco",
		Short: "Locks and elections with fencing tokens on etcd, ZooKeeper or Redis, from the shell",
		Long: `disco runs commands under locks and elections on etcd, ZooKeeper or Redis
and hands them a fencing token (FENCING_TOKEN) to pass to the resources they
write to. --endpoints chooses the service by its scheme: etcd (the default,
host:port or etcd://host:port,...), zk://host:port,... or redis://host:port/db.

Exit statuses: CMD's own; 1 disco's error (the service unreachable, a
timeout); 2 bad usage (also a NAME or --ttl the service refuses); 3 the
lock or leadership was lost, or in doubt, while CMD ran (CMD was
terminated) or before it could start (CMD did not run), or was found lost
by the release after CMD; 126/127 CMD could not be started / was not
found; 128+N disco was interrupted by signal N (SIGINT, SIGTERM, SIGHUP)
before CMD started, or CMD died of signal N.

Names: a NAME starts with "/" and does not end with "/", and is one the
service takes (not over 1024 bytes; on ZooKeeper a path it takes); others
are refused with status 2, before disco connects. On etcd a primitive on
NAME keeps its keys under the prefix NAME/ (-v prints it), the keys
'etcdctl lock NAME' and 'etcdctl elect NAME' use; a rwlock also keeps
NAME.epoch. On ZooKeeper its znodes are NAME's children, in Curator's
layouts; on Redis its keys are NAME/.... Names are independent: the keys
of NAME/sub are not NAME's.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		if cmd != root {
			err = fmt.Errorf("%s: %w", cmd.Name(), err)
		}
		return usageErr(err)
	})
	def := endpointsFromEnv()
	if len(def) == 0 {
		def = []string{defaultEndpoint}
	}
	f := root.PersistentFlags()
	f.StringSliceVar(&g.endpoints, "endpoints", def, "the service, comma-separated: etcd host:port (or etcd://, http://), zk://host:port,..., or redis://host:port/db; "+envEndpoints+" or "+embedded.EnvEndpoints+" sets the default")
	f.DurationVar(&g.ttl, "ttl", 10*time.Second, "TTL of lock and election sessions (the lease, at most 2500000h on etcd, which raises it to at least 1.5 election timeouts; on ZooKeeper the session timeout, at most 596h, which the server keeps between its minSessionTimeout and maxSessionTimeout: disco warns when either grants another), whole seconds: how long a hold outlives a crashed disco")
	f.BoolVar(&g.json, "json", false, "machine-readable output of status, observe and elect without CMD: one JSON object per line")
	f.BoolVarP(&g.verbose, "verbose", "v", false, "report progress (waiting, acquired, released) on stderr")
	f.DurationVar(&g.dialTimeout, "dial-timeout", 5*time.Second, "give up when the service does not answer within this")
	f.DurationVar(&g.commandTimeout, "command-timeout", 5*time.Second, "bound on each of disco's own requests to the service (not the wait for a lock)")
	root.PersistentPreRunE = func(*cobra.Command, []string) error { return g.check() }
	root.AddCommand(newLockCmd(g), newElectCmd(g), newObserveCmd(g), newStatusCmd(g), newEtcdCmd(g))
	return root
}

// check validates the global flags.
func (g *globals) check() error {
	switch {
	case len(g.endpoints) == 0:
		return usageErr(errors.New("--endpoints: no endpoint given"))
	case g.ttl < time.Second || g.ttl%time.Second != 0:
		return usageErr(fmt.Errorf("--ttl %v: must be whole seconds, at least 1s", g.ttl))
	case g.dialTimeout <= 0:
		return usageErr(fmt.Errorf("--dial-timeout %v: must be positive", g.dialTimeout))
	case g.commandTimeout <= 0:
		return usageErr(fmt.Errorf("--command-timeout %v: must be positive", g.commandTimeout))
	}
	return nil
}

// argsErr is a usage error of cmd's arguments, in its own words.
func argsErr(cmd *cobra.Command, format string, a ...any) error {
	return usageErr(fmt.Errorf(cmd.Name()+": "+format, a...))
}

// oneName requires exactly one argument, NAME.
func oneName(cmd *cobra.Command, a []string) error {
	switch {
	case len(a) == 0:
		return argsErr(cmd, "no NAME")
	case len(a) > 1:
		return argsErr(cmd, "one NAME, not %d: %s", len(a), strings.Join(a, " "))
	}
	return nil
}

// runE adapts f to cobra: an error that is not already an exitError is
// disco's own failure (exit status 1).
func runE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, a []string) error {
		err := f(cmd, a)
		var ee *exitError
		switch {
		case err == nil || errors.As(err, &ee):
			return err
		case errors.Is(err, primitives.ErrInvalidArgument):
			// A NAME or --ttl the service's library refuses (every
			// backend's sentinel wraps primitives.ErrInvalidArgument).
			return usageErr(err)
		}
		return &exitError{code: exitFailure, err: err}
	}
}

// connect returns a client of g.endpoints that has answered a request
// within the dial timeout, so a dead endpoint fails fast with a clear error.
func (g *globals) connect(ctx context.Context, endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: g.dialTimeout,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, "disco-ping", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, g.unreachable(ctx, "etcd", endpoints, began, err)
	}
	return cli, nil
}

// options returns the etcdio options of the session disco's primitive
// holds by: its TTL, and the lease grant bounded by ctx.
func (g *globals) options(ctx context.Context) []etcdio.Option {
	return []etcdio.Option{etcdio.WithTTL(g.ttl), etcdio.WithContext(ctx)}
}

// commandCtx returns a context bounding one of disco's own requests.
func (g *globals) commandCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return withCommandTimeout(ctx, g.commandTimeout)
}

// logf reports progress on stderr with --verbose.
func (g *globals) logf(format string, a ...any) {
	if g.verbose {
		fmt.Fprintf(g.stderr, "disco: "+format+"\n", a...)
	}
}
