package etcdio

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is a set of Prometheus collectors that sessions and primitives
// report to (WithMetrics). Make one per registry with NewMetrics and share
// it: every session given it adds to the same series. Labels stay bounded:
// the primitive's kind (lock, rwlock, election) and, for losses, the cause;
// never a key, token or prefix.
type Metrics struct {
	acquisitions *prometheus.CounterVec
	waits        *prometheus.HistogramVec
	holds        *prometheus.HistogramVec
	handoffs     *prometheus.CounterVec
	losses       *prometheus.CounterVec
	suspensions  prometheus.Counter
	keepaliveRTT prometheus.Histogram
	leaseMargin  prometheus.Histogram
	leaderChange prometheus.Counter
	loopBatch    prometheus.Histogram
}

// Loss causes, the values of disco_losses_total's cause label.
const (
	CauseLeaseExpired = "lease_expired" // no keepalive acknowledged in time
	CauseLeaseRevoked = "lease_revoked" // etcd said the lease is gone
	CauseKeyDeleted   = "key_deleted"   // someone else deleted the held key
)

// NewMetrics creates the collectors and registers them on reg. It fails if
// reg refuses them (for example, a second NewMetrics on the same registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("etcdio: NewMetrics: nil Registerer: %w", ErrInvalidArgument)
	}
	waitBuckets := prometheus.ExponentialBuckets(0.0005, 4, 10) // 0.5 ms .. ~2 min
	m := &Metrics{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_acquisitions_total",
			Help: "Grants acquired: lock and rwlock grants, election terms."}, []string{"kind"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "disco_acquire_wait_seconds",
			Help: "Time from Lock/RLock/Campaign to the grant.", Buckets: waitBuckets}, []string{"kind"}),
		holds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "disco_hold_seconds",
			Help: "How long grants were held, however they ended.", Buckets: waitBuckets}, []string{"kind"}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_handoffs_total",
			Help: "Grants acquired after waiting behind another owner."}, []string{"kind"}),
		losses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_losses_total",
			Help: "Grants that ended involuntarily, by cause: lease_expired, lease_revoked, key_deleted."}, []string{"kind", "cause"}),
		suspensions: prometheus.NewCounter(prometheus.CounterOpts{Name: "disco_suspensions_total",
			Help: "Times a session went unconfirmed long enough to suspend its holders."}),
		keepaliveRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_keepalive_rtt_seconds",
			Help: "Round trip of acknowledged keepalives.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		leaseMargin: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_lease_margin_seconds",
			Help:    "Time left before the lease would have ended when a keepalive was acknowledged: low means late.",
			Buckets: prometheus.LinearBuckets(0, 5, 13)}),
		leaderChange: prometheus.NewCounter(prometheus.CounterOpts{Name: "disco_leader_changes_total",
			Help: "Leadership changes seen by elections (including to no leader)."}),
		loopBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_loop_mailbox_depth",
			Help:    "Messages waiting in a session loop's mailbox each time it drains it.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
	}
	for _, c := range []prometheus.Collector{m.acquisitions, m.waits, m.holds, m.handoffs, m.losses,
		m.suspensions, m.keepaliveRTT, m.leaseMargin, m.leaderChange, m.loopBatch} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("etcdio: NewMetrics: %w", err)
		}
	}
	return m, nil
}

// WithMetrics makes the session (and, for a primitive, its own session and
// itself) report to m. Without it nothing is measured.
func WithMetrics(m *Metrics) Option {
	return func(o *options) { o.metrics = m }
}

// The methods below are nil-safe: a session without metrics calls them on nil.

func (m *Metrics) acquired(kind string, wait time.Duration, waited bool) {
	if m == nil {
		return
	}
	m.acquisitions.WithLabelValues(kind).Inc()
	m.waits.WithLabelValues(kind).Observe(wait.Seconds())
	if waited {
		m.handoffs.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) ended(kind string, held time.Duration, cause string) {
	if m == nil {
		return
	}
	m.holds.WithLabelValues(kind).Observe(held.Seconds())
	if cause != "" {
		m.losses.WithLabelValues(kind, cause).Inc()
	}
}

func (m *Metrics) suspended() {
	if m != nil {
		m.suspensions.Inc()
	}
}

func (m *Metrics) keptAlive(rtt, margin time.Duration) {
	if m != nil {
		m.keepaliveRTT.Observe(rtt.Seconds())
		m.leaseMargin.Observe(max(margin, 0).Seconds())
	}
}

func (m *Metrics) leaderChanged() {
	if m != nil {
		m.leaderChange.Inc()
	}
}

func (m *Metrics) drained(n int) {
	if m != nil {
		m.loopBatch.Observe(float64(n))
	}
}
