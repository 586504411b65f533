package guard

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// Metrics is a set of Prometheus collectors a guard reports to
// (WithMetrics). Make one per guard with NewMetrics; nothing is registered
// anywhere but on the Registerer given to NewMetrics. Labels stay bounded:
// the rejection reason, and the scope only for the per-scope mark, which
// exists only with WithScopeLabels.
//
// Series:
//
//   - disco_guard_admitted_total: tokens accepted by Check or admitted by
//     Admit (and so by the middleware and interceptors);
//   - disco_guard_rejected_total{reason}: requests refused, by reason:
//     missing, malformed, stale, wrong_scope, store (the store failed, or
//     did not answer within the request's context or the store timeout),
//     canceled (the request's context ended while it waited for requests
//     with lower tokens), forged (the verifier said the token is of no
//     current grant), unverified (the verifier could not tell in time);
//   - disco_guard_stale_distance: for each stale rejection, how far below
//     the mark the token was, in tokens (buckets 1, 4, 16, ...): near
//     misses (a holder just superseded) show as small distances, a zombie
//     that was paused long as large ones;
//   - disco_guard_admit_wait_seconds: how long Admit took to admit a request,
//     including the drain of lower tokens and any store write;
//   - disco_guard_mark: the highest mark of the guard (for a Keyed guard, the
//     highest mark of any scope it has seen since it started);
//   - disco_guard_scope_mark{scope}: each scope's mark, with WithScopeLabels.
type Metrics struct {
	admitted  prometheus.Counter
	rejected  *prometheus.CounterVec
	wait      prometheus.Histogram
	mark      prometheus.Gauge
	scopeMark *prometheus.GaugeVec // nil unless WithScopeLabels
	// staleDistance: how far below the mark each stale token was.
	staleDistance prometheus.Histogram

	mu  sync.Mutex // orders mark updates, so a gauge never goes back
	max atomic.Int64
}

// Rejection reasons, the values of disco_guard_rejected_total's reason label.
const (
	ReasonMissing    = "missing"
	ReasonMalformed  = "malformed"
	ReasonStale      = "stale"
	ReasonWrongScope = "wrong_scope"
	ReasonStore      = "store"
	ReasonCanceled   = "canceled"
	// ReasonForged: the verifier said the token is of no current grant
	// (WithVerifier).
	ReasonForged = "forged"
	// ReasonUnverified: the verifier could not tell, or did not answer in
	// time.
	ReasonUnverified = "unverified"
)

// reasons are all the rejection reasons, in the order metrics list them.
var reasons = []string{ReasonMissing, ReasonMalformed, ReasonStale, ReasonWrongScope, ReasonStore, ReasonCanceled, ReasonForged, ReasonUnverified}

// MetricsOption configures NewMetrics.
type MetricsOption func(*metricsConfig)

type metricsConfig struct{ scopeLabels bool }

// WithScopeLabels adds disco_guard_scope_mark, a gauge per scope. Its
// cardinality is the number of scopes the guard sees: use it only where
// scopes are few. A scope that is not valid UTF-8 (Prometheus labels must
// be) is labelled with each invalid byte sequence replaced by U+FFFD.
func WithScopeLabels() MetricsOption {
	return func(c *metricsConfig) { c.scopeLabels = true }
}

// NewMetrics creates the collectors and registers them on reg. It fails if
// reg is nil (an error wrapping primitives.ErrInvalidArgument) or refuses
// them (for example, a second NewMetrics on the same registry: wrap reg
// with prometheus.WrapRegistererWith to tell guards apart).
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOption) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("guard: NewMetrics: nil Registerer: %w", primitives.ErrInvalidArgument)
	}
	var mc metricsConfig
	for _, o := range opts {
		if o != nil {
			o(&mc)
		}
	}
	m := &Metrics{
		admitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "disco_guard_admitted_total",
			Help: "Tokens accepted by Check or admitted by Admit."}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "disco_guard_rejected_total",
			Help: "Requests refused, by reason: missing, malformed, stale, wrong_scope, store, canceled, forged, unverified."}, []string{"reason"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_guard_admit_wait_seconds",
			Help:    "Time Admit took to admit a request (drain of lower tokens, store writes).",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 12)}),
		mark: prometheus.NewGauge(prometheus.GaugeOpts{Name: "disco_guard_mark",
			Help: "The highest mark of the guard (any scope)."}),
		staleDistance: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "disco_guard_stale_distance",
			Help:    "How far below the mark (in tokens) each token rejected as stale was.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 12)}),
	}
	cs := []prometheus.Collector{m.admitted, m.rejected, m.wait, m.mark, m.staleDistance}
	if mc.scopeLabels {
		m.scopeMark = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "disco_guard_scope_mark",
			Help: "The mark of each scope."}, []string{"scope"})
		cs = append(cs, m.scopeMark)
	}
	for _, r := range reasons {
		m.rejected.WithLabelValues(r) // so every reason shows, at 0
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("guard: NewMetrics: %w", err)
		}
	}
	return m, nil
}

// reason classifies a rejection. A failure of the store or the verifier
// comes first: the error it wraps says nothing about the client's token.
func reason(err error) string {
	switch {
	case errors.Is(err, ErrStore):
		return ReasonStore
	case errors.Is(err, ErrUnverified):
		return ReasonUnverified
	case errors.Is(err, fencing.ErrWrongScope):
		return ReasonWrongScope
	case errors.Is(err, fencing.ErrTokenStale):
		return ReasonStale
	case errors.Is(err, fencing.ErrMalformedToken):
		return ReasonMalformed
	case errors.Is(err, fencing.ErrNoToken):
		return ReasonMissing
	case errors.Is(err, fencing.ErrTokenForged):
		return ReasonForged
	default:
		return ReasonCanceled
	}
}

func (m *Metrics) reject(err error) {
	if m == nil {
		return
	}
	m.rejected.WithLabelValues(reason(err)).Inc()
	if se := (*staleErr)(nil); errors.As(err, &se) {
		m.staleDistance.Observe(float64(se.mark - se.t))
	}
}

// admit records an accepted token of scope, held in s; wait > 0 only for
// Admit.
func (m *Metrics) admit(s *state, scope string, wait time.Duration) {
	if m == nil {
		return
	}
	m.admitted.Inc()
	if wait > 0 {
		m.wait.Observe(wait.Seconds())
	}
	m.sawMark(s, scope)
}

// sawMark reports the mark of scope, held in s, after a request of it,
// admitted or not: the mark rises by the tokens the guard accepts, and
// also by what it learns from a shared store, or by an Admit that raised
// it and then gave up; it starts at WithInitialMark.
func (m *Metrics) sawMark(s *state, scope string) {
	if m == nil {
		return
	}
	t := s.mark.Load()
	if t <= m.max.Load() && (m.scopeMark == nil || t <= s.reported.Load()) {
		return // nothing new: the common case, without the mutex
	}
	m.mu.Lock()
	if t > m.max.Load() {
		m.max.Store(t)
		m.mark.Set(float64(t))
	}
	if m.scopeMark != nil && t > s.reported.Load() {
		s.reported.Store(t)
		m.scopeMark.WithLabelValues(scopeLabel(scope)).Set(float64(t))
	}
	m.mu.Unlock()
}

// scopeLabel is scope as a label value: Prometheus refuses (panics on) a
// label value that is not valid UTF-8, and a scope is the client's bytes.
func scopeLabel(scope string) string {
	if utf8.ValidString(scope) {
		return scope
	}
	return strings.ToValidUTF8(scope, "\uFFFD")
}
