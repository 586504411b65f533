package embedded

import (
	"time"

	"go.uber.org/zap"
)

// DefaultStartTimeout bounds how long Start and StartCluster wait for the
// servers to become ready, unless overridden by WithStartTimeout.
const DefaultStartTimeout = 30 * time.Second

// Raft timing used by every embedded member: a 20 ms heartbeat and a 200 ms
// election timeout, so that a cluster elects a leader in a fraction of a
// second and fails over quickly, while staying stable on a loaded machine.
const (
	tickMs     = 20
	electionMs = 200
)

// Option configures Start, StartCluster and StartOrEnv.
type Option func(*options)

type options struct {
	logger       *zap.Logger
	noFsync      bool
	startTimeout time.Duration
	peerProxies  bool
}

func buildOptions(opts []Option) options {
	o := options{logger: zap.NewNop(), startTimeout: DefaultStartTimeout}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.logger == nil {
		o.logger = zap.NewNop()
	}
	if o.startTimeout <= 0 {
		o.startTimeout = DefaultStartTimeout
	}
	return o
}

// WithLogger sends the logs of the etcd servers and proxies to lg. The
// default, and the effect of a nil lg, is to discard them.
func WithLogger(lg *zap.Logger) Option {
	return func(o *options) { o.logger = lg }
}

// WithUnsafeNoFsync makes etcd skip every fsync. Writes become much faster
// but are no longer durable across a machine crash; meant for benchmarks
// that measure the coordination layer rather than the disk. Data still
// survives a member's Stop and Restart, which close files cleanly.
func WithUnsafeNoFsync() Option {
	return func(o *options) { o.noFsync = true }
}

// WithStartTimeout bounds how long starting waits for the servers to become
// ready. Non-positive values select DefaultStartTimeout.
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.startTimeout = d }
}

// WithPeerProxies makes StartCluster route the traffic between members
// through a proxy in front of each member's peer port as well, so that
// Member.Delay slows the member's links to its peers as well as to its
// clients (a cluster spread over several hosts). Blackhole still cuts off
// clients only. Start ignores it.
func WithPeerProxies() Option {
	return func(o *options) { o.peerProxies = true }
}
