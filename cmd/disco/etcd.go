package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/ahrtr/disco/etcdio/embedded"
)

// etcdFlags configure 'disco etcd'.
type etcdFlags struct {
	dataDir    string
	clientPort int
	peerPort   int
	noFsync    bool
	logLevel   string
}

func newEtcdCmd(g *globals) *cobra.Command {
	var f etcdFlags
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a single-member etcd in this process, for local development",
		Long: `Run a single-member etcd cluster inside disco, on 127.0.0.1, for local
development; print the line to export (export ETCD_ENDPOINTS=...) on stdout
and serve until SIGINT, SIGTERM or SIGHUP.

Without --data-dir the data lives in a temporary directory removed at exit.
Port 0 picks a free port.`,
		Args: func(cmd *cobra.Command, a []string) error {
			if len(a) > 0 {
				return argsErr(cmd, "takes no arguments, not %s", strings.Join(a, " "))
			}
			return nil
		},
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, p := range []struct {
				name string
				v    int
			}{{"--client-port", f.clientPort}, {"--peer-port", f.peerPort}} {
				if p.v < 0 || p.v > 65535 {
					return argsErr(cmd, "%s %d: not a port", p.name, p.v)
				}
			}
			return nil
		},
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			return runEtcd(cmd.Context(), g, f)
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "", "data directory, kept at exit (default: a temporary one, removed at exit)")
	fl.IntVar(&f.clientPort, "client-port", 2379, "client port on 127.0.0.1 (0: any free port)")
	fl.IntVar(&f.peerPort, "peer-port", 2380, "peer port on 127.0.0.1 (0: any free port)")
	fl.BoolVar(&f.noFsync, "unsafe-no-fsync", false, "skip fsync: faster, but data may be lost if the machine crashes")
	fl.StringVar(&f.logLevel, "log-level", "", "etcd's log level on stderr once it serves: debug, info, warn, error (default error; set, it applies from the start)")
	// Its help lists only its own flags: the global ones are for the
	// commands that use a service.
	cmd.SetHelpFunc(func(c *cobra.Command, a []string) {
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) { f.Hidden = true })
		c.Parent().HelpFunc()(c, a)
	})
	return cmd
}

func runEtcd(ctx context.Context, g *globals, f etcdFlags) error {
	ctx, stop := notifyContext(ctx)
	defer stop()
	dir := f.dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "disco-etcd-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	client, err := portURL(f.clientPort)
	if err != nil {
		return err
	}
	peer, err := portURL(f.peerPort)
	if err != nil {
		return err
	}
	cfg := embed.NewConfig()
	cfg.Name = "disco"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.UnsafeNoFsync = f.noFsync
	serving := zap.ErrorLevel
	if f.logLevel != "" {
		l, err := zapcore.ParseLevel(f.logLevel)
		if err != nil {
			return usageErr(fmt.Errorf("etcd: --log-level: %w", err))
		}
		serving = l
	}
	// Until it serves, etcd logs nothing unless asked (--log-level): a
	// failure to start is reported by disco, in one line.
	level := zap.NewAtomicLevelAt(zap.FatalLevel)
	if f.logLevel != "" {
		level.SetLevel(serving)
	}
	zc := zap.NewProductionConfig()
	zc.Level, zc.Encoding, zc.Sampling, zc.DisableStacktrace = level, "console", nil, true
	lg, err := zc.Build()
	if err != nil {
		return err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return startFailed(err, f)
	}
	defer func() {
		// etcd reports its own listeners closing as errors: not news.
		level.SetLevel(zap.FatalLevel)
		e.Close()
	}()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd failed to start: %w", err)
	case <-ctx.Done():
		return nil
	case <-time.After(embedded.DefaultStartTimeout):
		return errors.New("etcd not ready within " + embedded.DefaultStartTimeout.String())
	}
	level.SetLevel(serving)
	fmt.Fprintf(g.stdout, "export %s=%s\n", embedded.EnvEndpoints, client.String())
	fmt.Fprintf(g.stderr, "disco: etcd serving on %s, data in %s; Ctrl-C to stop\n", client.String(), dir)
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd: %w", err)
	}
}

// startFailed words etcd's failure to start: a port in use is named, with
// the flags that pick free ones.
func startFailed(err error, f etcdFlags) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("etcd: %w", err)
	}
	flag, port := "--client-port", f.clientPort
	var op *net.OpError
	if errors.As(err, &op) && op.Addr != nil {
		if _, p, _ := net.SplitHostPort(op.Addr.String()); p == strconv.Itoa(f.peerPort) {
			flag, port = "--peer-port", f.peerPort
		}
	}
	return fmt.Errorf("etcd: port %d (%s) is in use; --client-port 0 --peer-port 0 picks free ports", port, flag)
}

// portURL returns http://127.0.0.1:port, picking a free port for 0.
func portURL(port int) (url.URL, error) {
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return url.URL{}, fmt.Errorf("finding a free port: %w", err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}
