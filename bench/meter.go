package main

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/metrics"
)

// store is the backend a side runs on.
type store string

const (
	onEtcd  store = "etcd"
	onZK    store = "zk"
	onRedis store = "redis"
)

// Series a meter's snapshot adds to etcd's (see metrics.go).
const (
	// zkReceived is ZooKeeper's srvr "Received:": packets the server read
	// from clients, pings included (the srvr command itself is not one).
	zkReceived = "zk_packets_received"
	// redisCommands counts the commands a side's Redis clients sent (a
	// script is one; an EVALSHA that Redis does not know yet and the EVAL
	// after it, two), counted by a hook on each client. Redis's own
	// total_commands_processed is no per-run figure: it counts the calls
	// inside scripts too.
	redisCommands = "bench_redis_commands"
	// peerEvents counts the watch events a baseline's connections
	// delivered, counted by bench (zk-lock's event callback).
	peerEvents = "bench_peer_events"

	wakeupsSeries  = "disco_wakeups_total"
	recheckSeries  = "disco_rechecks_total"
	messagesSeries = "disco_wake_messages_total"
	renewalsSeries = "disco_keepalive_rtt_seconds_count"
)

// zkTimeout is the session timeout of every ZooKeeper session in bench
// (zkio's default TTL, asked for by the zk-lock baseline too; the test
// server grants up to 10 s). go-zookeeper pings every third of it whether
// or not requests flow, so a side's pings over a window are known from
// its sessions and the window's length.
const zkTimeout = 10 * time.Second

// meter measures one side of a scenario on its store: the store's own
// counters (etcd's metrics page, ZooKeeper's srvr, Redis's INFO), and the
// disco metrics its disco owners report to a registry of its own
// (WithMetrics(m)), or the events bench counts for a baseline.
type meter struct {
	store    store
	e        *env
	reg      *prometheus.Registry
	m        *metrics.Metrics
	sessions int          // ZooKeeper: sessions open through the window, for the pings
	events   atomic.Int64 // baselines: watch events their connections delivered
	commands atomic.Int64 // Redis: commands its clients sent
	counted  bool         // events is counted (a baseline that bench can count)

	mu      sync.Mutex
	closers []func() // run by close, when the side ends
}

// newMeter returns a meter of a side on st.
func newMeter(e *env, st store) *meter {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		panic(err) // a fresh registry takes them
	}
	return &meter{store: st, e: e, reg: reg, m: m}
}

// measured reports whether the meter can read its store's load: etcd
// needs a metrics endpoint (an external etcd without -metrics has none).
func (mt *meter) measured() bool { return mt.store != onEtcd || mt.e.metricsURL != "" }

// scrape reads the store's counters and the side's disco metrics.
func (mt *meter) scrape(ctx context.Context) (snapshot, error) {
	var s snapshot
	var err error
	switch mt.store {
	case onEtcd:
		s, err = scrape(ctx, mt.e.metricsURL)
	case onZK:
		s, err = scrapeZK(mt.e.zkAddr)
	case onRedis:
		s = snapshot{at: time.Now(), series: map[string]float64{redisCommands: float64(mt.commands.Load())}}
	}
	if err != nil {
		return snapshot{}, err
	}
	fams, err := mt.reg.Gather()
	if err != nil {
		return snapshot{}, err
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				s.series[f.GetName()] += m.GetCounter().GetValue() // every kind together
			case m.GetHistogram() != nil:
				s.series[f.GetName()+"_count"] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	s.series[peerEvents] = float64(mt.events.Load())
	return s, nil
}

// scrapeZK reads srvr's packets received.
func scrapeZK(addr string) (snapshot, error) {
	start := time.Now()
	out, err := testserver.FourLetter(addr, "srvr")
	if err != nil {
		return snapshot{}, fmt.Errorf("srvr %s: %w", addr, err)
	}
	s := snapshot{series: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Received: "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("srvr %s: %q: %w", addr, sc.Text(), err)
			}
			s.series[zkReceived] = n
			s.at = start.Add(time.Since(start) / 2)
			return s, nil
		}
	}
	return snapshot{}, fmt.Errorf("srvr %s: no Received line in %q", addr, out)
}

// load turns two snapshots of the meter into per-acquisition figures.
func (mt *meter) load(before, after snapshot, acquisitions int) *load {
	l := loadBetween(before, after, acquisitions)
	l.Store = string(mt.store)
	if acquisitions == 0 {
		return l
	}
	n := float64(acquisitions)
	d := func(k string) float64 { return after.series[k] - before.series[k] }
	switch mt.store {
	case onZK:
		// go-zookeeper's pings, every third of the timeout on each session,
		// are to requests what etcd's keepalives are: left out.
		pings := float64(mt.sessions) * after.at.Sub(before.at).Seconds() / (zkTimeout / 3).Seconds()
		l.Requests = max(d(zkReceived)-pings, 0) / n
	case onRedis:
		// Left out: the session refreshes (acknowledged ones: the
		// renewals the metrics count).
		l.Requests = max(d(redisCommands)-d(renewalsSeries), 0) / n
	}
	switch {
	case mt.counted:
		l.Wakeups = ptr(d(peerEvents) / n)
	case after.series[wakeupsSeries] > 0 || after.series["disco_acquisitions_total"] > 0:
		l.Wakeups = ptr(d(wakeupsSeries) / n)
		if mt.store == onRedis {
			l.Rechecks, l.WakeMessages = ptr(d(recheckSeries)/n), ptr(d(messagesSeries)/n)
		}
	}
	return l
}

func ptr[T any](v T) *T { return &v }
