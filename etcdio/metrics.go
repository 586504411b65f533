package etcdio

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/metrics"
)

// Metrics is the set of Prometheus collectors that sessions and primitives
// report to (WithMetrics): package metrics' one type, which every disco
// backend accepts. Make one per registry and share it: every session given
// it adds to the same series, whatever its backend.
type Metrics = metrics.Metrics

// Loss causes, the values of disco_losses_total's cause label.
const (
	CauseLeaseExpired = metrics.CauseLeaseExpired // no keepalive acknowledged in time
	CauseLeaseRevoked = metrics.CauseLeaseRevoked // etcd said the lease is gone
	CauseKeyDeleted   = metrics.CauseKeyDeleted   // someone else deleted the held key
)

// NewMetrics creates the collectors and registers them on reg, as
// metrics.New does. It fails if reg refuses them (for example, a second
// NewMetrics on the same registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("etcdio: NewMetrics: nil Registerer: %w", ErrInvalidArgument)
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("etcdio: NewMetrics: %w", err)
	}
	return m, nil
}

// WithMetrics makes the session (and, for a primitive, its own session and
// itself) report to m. Without it nothing is measured.
func WithMetrics(m *Metrics) Option {
	return func(o *options) { o.Metrics = m }
}
