package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

// maxPortAttempts is how many times a start is retried with fresh ports when
// a port picked as free was taken before etcd could bind it.
const maxPortAttempts = 5

// isAddrInUse reports whether err says that a port was already taken.
func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || (err != nil && strings.Contains(err.Error(), "address already in use"))
}

func loopbackURL(port int) url.URL {
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

// memberSpec is everything needed to (re)start one etcd member with a stable
// identity.
type memberSpec struct {
	name           string
	dir            string
	client         url.URL
	peer           url.URL
	advertisePeer  url.URL // its proxy (WithPeerProxies); zero: peer itself
	metrics        url.URL
	initialCluster string
	token          string
}

// config builds a fresh embed.Config for spec. A new one is built for every
// start because embed keeps per-start state in it.
func (o *options) config(spec memberSpec) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = spec.name
	cfg.Dir = spec.dir
	cfg.ListenClientUrls = []url.URL{spec.client}
	cfg.AdvertiseClientUrls = []url.URL{spec.client}
	cfg.ListenPeerUrls = []url.URL{spec.peer}
	cfg.AdvertisePeerUrls = []url.URL{spec.peer}
	if spec.advertisePeer.Host != "" {
		cfg.AdvertisePeerUrls = []url.URL{spec.advertisePeer}
	}
	cfg.ListenMetricsUrls = []url.URL{spec.metrics}
	cfg.InitialCluster = spec.initialCluster
	cfg.InitialClusterToken = spec.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs = tickMs
	cfg.ElectionMs = electionMs
	cfg.UnsafeNoFsync = o.noFsync
	cfg.EnableGRPCGateway = false
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(o.logger.Named(spec.name))
	return cfg
}

// startEtcd starts one member without waiting for it to be ready.
func (o *options) startEtcd(spec memberSpec) (*embed.Etcd, error) {
	e, err := embed.StartEtcd(o.config(spec))
	if err != nil {
		return nil, fmt.Errorf("embedded: starting etcd member %s: %w", spec.name, err)
	}
	return e, nil
}

// waitReady waits until e is ready to serve clients, fails, or ctx ends.
func waitReady(ctx context.Context, name string, e *embed.Etcd) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err, ok := <-e.Err():
		if !ok || err == nil {
			err = errors.New("stopped")
		}
		return fmt.Errorf("embedded: etcd member %s failed while starting: %w", name, err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("embedded: etcd member %s stopped while starting", name)
	case <-ctx.Done():
		return fmt.Errorf("embedded: waiting for etcd member %s to become ready: %w", name, context.Cause(ctx))
	}
}

// startTimeoutContext returns a context bounded by the start timeout.
func (o *options) startTimeoutContext() (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(context.Background(), o.startTimeout,
		fmt.Errorf("not ready within %v", o.startTimeout))
}
