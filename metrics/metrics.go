// Package metrics is the one set of Prometheus collectors every disco
// backend reports to. Make one Metrics per registry with New and give it to
// each backend's WithMetrics (etcdio, zkio, redisio, ...): every session and
// primitive given it adds to the same series, whatever its backend.
//
// Labels stay bounded: the primitive's kind (lock, rwlock, election) and,
// for losses, the cause; never a key, token or name.
//
// The series:
//
//	disco_acquisitions_total{kind}        grants acquired
//	disco_acquire_wait_seconds{kind}      time from the call to the grant
//	disco_hold_seconds{kind}              how long grants were held
//	disco_handoffs_total{kind}            grants acquired after waiting behind another owner
//	disco_losses_total{kind,cause}        grants that ended involuntarily
//	disco_suspensions_total               sessions gone unconfirmed long enough to suspend
//	disco_keepalive_rtt_seconds           round trip of acknowledged renewals
//	disco_lease_margin_seconds            time left before the deadline when a renewal was acknowledged
//	disco_leader_changes_total            leadership changes seen by elections (etcd, ZooKeeper, Redis: while someone subscribes or observes)
//	disco_loop_mailbox_depth              messages a session loop drains at once
//	disco_wakeups_total{kind}             watch events and wake messages a primitive's waiters and holders acted on
//	disco_rechecks_total{kind}            looks a waiter took on its own timer, with no notification (redisio)
//	disco_wake_messages_total{kind}       wake messages a session received on a primitive's channel (redisio)
//
// The last three are counted on the client, the same way on every backend,
// so that a herd (a release waking waiters it does not admit) shows as
// wakeups per acquisition: disco_wakeups_total divided by
// disco_acquisitions_total of the same kind. A wakeup is one watch event
// (etcd: each event of a watch response; ZooKeeper: each watch
// notification) or one wake message (Redis pub/sub) handed to a waiting or
// holding primitive of the session, which then looks again. A Redis
// session receives the wake messages of its own channel (a lock's,
// rwlock's or semaphore's handoff) and of the names of its elections and
// double barriers, and hands each only to the waiter it names:
// disco_wake_messages_total counts every message received,
// disco_wakeups_total the ones handed on. A redisio waiter also looks on a
// timer, the bound on a missed message: disco_rechecks_total, never counted
// as a wakeup.
//
// The recording methods (Acquired, Ended, ...) are for backends; every one
// of them is safe on a nil *Metrics, which records nothing.
package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/primitives"
)

// Metrics is a set of collectors registered on one registry.
type Metrics struct {
	acquisitions *prometheus.CounterVec
	waits        *prometheus.HistogramVec
	holds        *prometheus.HistogramVec
	handoffs     *prometheus.CounterVec
	losses       *prometheus.CounterVec
	suspensions  prometheus.Counter
	renewalRTT   prometheus.Histogram
	margin       prometheus.Histogram
	leaderChange prometheus.Counter
	loopBatch    prometheus.Histogram
	wakeups      *prometheus.CounterVec
	rechecks     *prometheus.CounterVec
	wakeMessages *prometheus.CounterVec
}

// Loss causes, the values of disco_losses_total's cause label.
const (
	CauseLeaseExpired = "lease_expired" // no renewal acknowledged before the deadline
	CauseLeaseRevoked = "lease_revoked" // the store said the lease or session is gone
	CauseKeyDeleted   = "key_deleted"   // someone else deleted the held key
)

// New creates the collectors and registers them on reg. It fails if reg
// refuses them (for example, a second New on the same registry), and with an
// error wrapping primitives.ErrInvalidArgument if reg is nil.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("metrics: New: nil Registerer: %w", primitives.ErrInvalidArgument)
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
		renewalRTT: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_keepalive_rtt_seconds",
			Help: "Round trip of acknowledged renewals (keepalives, refreshes, pings).", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		margin: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_lease_margin_seconds",
			Help:    "Time left before the lease would have ended when a renewal was acknowledged: low means late.",
			Buckets: prometheus.LinearBuckets(0, 5, 13)}),
		leaderChange: prometheus.NewCounter(prometheus.CounterOpts{Name: "disco_leader_changes_total",
			Help: "Leadership changes seen by elections (including to no leader); on etcd, ZooKeeper and Redis, while someone subscribes to or observes them."}),
		loopBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_loop_mailbox_depth",
			Help:    "Messages waiting in a session loop's mailbox each time it drains it.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		wakeups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_wakeups_total",
			Help: "Watch events (etcd, ZooKeeper) and wake messages (Redis) that a primitive's waiters and holders received and acted on."}, []string{"kind"}),
		rechecks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_rechecks_total",
			Help: "Looks a waiter took on its own timer, with no notification (redisio's bound on a missed wake message)."}, []string{"kind"}),
		wakeMessages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_wake_messages_total",
			Help: "Wake messages a session's pub/sub connection received on a primitive's channel, whether or not one of its waiters was due (redisio)."}, []string{"kind"}),
	}
	for _, c := range []prometheus.Collector{m.acquisitions, m.waits, m.holds, m.handoffs, m.losses,
		m.suspensions, m.renewalRTT, m.margin, m.leaderChange, m.loopBatch, m.wakeups, m.rechecks, m.wakeMessages} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: New: %w", err)
		}
	}
	return m, nil
}

// Acquired records a grant of kind after wait; waited says it came after
// waiting behind another owner.
func (m *Metrics) Acquired(kind string, wait time.Duration, waited bool) {
	if m == nil {
		return
	}
	m.acquisitions.WithLabelValues(kind).Inc()
	m.waits.WithLabelValues(kind).Observe(wait.Seconds())
	if waited {
		m.handoffs.WithLabelValues(kind).Inc()
	}
}

// Ended records the end of a grant of kind held for held; cause is a Cause
// constant for a loss, "" for a release.
func (m *Metrics) Ended(kind string, held time.Duration, cause string) {
	if m == nil {
		return
	}
	m.holds.WithLabelValues(kind).Observe(held.Seconds())
	if cause != "" {
		m.losses.WithLabelValues(kind, cause).Inc()
	}
}

// Suspended records that a session (on Kubernetes, a Lease) suspended its
// holders.
func (m *Metrics) Suspended() {
	if m != nil {
		m.suspensions.Inc()
	}
}

// Renewed records an acknowledged renewal: its round trip, and the time that
// was left before the deadline when it came.
func (m *Metrics) Renewed(rtt, margin time.Duration) {
	if m != nil {
		m.renewalRTT.Observe(rtt.Seconds())
		m.margin.Observe(max(margin, 0).Seconds())
	}
}

// LeaderChanged records a change of leader seen by an election.
func (m *Metrics) LeaderChanged() {
	if m != nil {
		m.leaderChange.Inc()
	}
}

// Drained records that a session loop took n messages from its mailbox at
// once; a wake-up that found none (its signal came after an earlier drain
// took the message) is not recorded.
func (m *Metrics) Drained(n int) {
	if m != nil && n > 0 {
		m.loopBatch.Observe(float64(n))
	}
}

// Woken records that n watch events or wake messages reached a waiter or
// holder of a primitive of kind, which looks again at each.
func (m *Metrics) Woken(kind string, n int) {
	if m != nil && n > 0 {
		m.wakeups.WithLabelValues(kind).Add(float64(n))
	}
}

// Rechecked records a look a waiter of kind took on its own timer, with no
// notification.
func (m *Metrics) Rechecked(kind string) {
	if m != nil {
		m.rechecks.WithLabelValues(kind).Inc()
	}
}

// WakeMessage records a wake message a session received on the channel of
// a primitive of kind, handed on to a waiter or not.
func (m *Metrics) WakeMessage(kind string) {
	if m != nil {
		m.wakeMessages.WithLabelValues(kind).Inc()
	}
}
