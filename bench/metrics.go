package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ahrtr/disco/internal/ctxtime"
)

// The etcd metrics that measure load per acquisition.
const (
	// grpc_server_msg_received_total counts every request message: one per
	// unary call (Txn, Range, Put, DeleteRange, ...) and one per message on
	// a stream (watch create/cancel/progress, lease keepalive).
	metricRequests = "grpc_server_msg_received_total"
	// etcd_debugging_mvcc_events_total counts watch events delivered to
	// watchers (mvcc.ReportEventReceived, called by the watch server as it
	// sends them).
	metricWatchEvents = "etcd_debugging_mvcc_events_total"
)

// keepaliveMethod is left out of the request count: lease keepalives come
// from the TTL and the clock, not from acquisitions.
const keepaliveMethod = "LeaseKeepAlive"

// snapshot is one scrape of a Prometheus text endpoint: series -> value.
type snapshot struct {
	at     time.Time // middle of the scrape
	series map[string]float64
}

// scrape reads a Prometheus text-format endpoint. Only the series named in
// keep are parsed.
func scrape(ctx context.Context, url string) (snapshot, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return snapshot{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return snapshot{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return snapshot{}, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	s := snapshot{series: map[string]float64{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metricRequests) && !strings.HasPrefix(line, metricWatchEvents) {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		s.series[line[:sp]] = v
	}
	if err := sc.Err(); err != nil {
		return snapshot{}, fmt.Errorf("scraping %s: %w", url, err)
	}
	s.at = start.Add(time.Since(start) / 2)
	return s, nil
}

// seriesName and label split `name{a="x",b="y"}`.
func seriesName(series string) string {
	if i := strings.IndexByte(series, '{'); i >= 0 {
		return series[:i]
	}
	return series
}

func label(series, name string) string {
	k := name + `="`
	i := strings.Index(series, k)
	if i < 0 {
		return ""
	}
	rest := series[i+len(k):]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// settle waits until etcd at url has served fewer than quiet request
// messages a second (keepalives left out) in each of three seconds in a
// row, or until limit passes, and returns how long it waited and whether
// it settled.
func settle(ctx context.Context, url string, quiet float64, limit time.Duration) (time.Duration, bool, error) {
	const calm = 3 // seconds in a row
	start := time.Now()
	prev, err := scrape(ctx, url)
	if err != nil {
		return 0, false, err
	}
	for n := 0; time.Since(start) < limit; {
		if !ctxtime.Sleep(ctx, time.Second) {
			return time.Since(start), false, ctx.Err()
		}
		cur, err := scrape(ctx, url)
		if err != nil {
			return time.Since(start), false, err
		}
		if rate := loadBetween(prev, cur, 1).Requests / cur.at.Sub(prev.at).Seconds(); rate < quiet {
			n++
		} else {
			n = 0
		}
		if n == calm {
			return time.Since(start), true, nil
		}
		prev = cur
	}
	return time.Since(start), false, nil
}

// load is the store's work per acquisition over a measured window, and
// what the side's clients were told.
type load struct {
	Store        string `json:"store"` // etcd, zk, redis
	Acquisitions int    `json:"acquisitions"`
	// Requests: etcd: gRPC request messages, lease keepalives left out;
	// ZooKeeper: packets received, pings left out; Redis: commands
	// processed (a script is one), session refreshes left out.
	Requests float64 `json:"requests_per_acq"`
	// WatchEvents: etcd's count of the watch events it sent (etcd only).
	WatchEvents float64            `json:"watch_events_per_acq"`
	ByMethod    map[string]float64 `json:"requests_per_acq_by_method,omitempty"`
	// Wakeups: a disco side's disco_wakeups_total, counted by its clients
	// (watch events and wake messages its waiters and holders acted on);
	// a baseline's watch events as bench counts them (zk-lock), 0 for one
	// that polls (redis-setnx-poll); nil where unknown (etcd's recipes:
	// see WatchEvents).
	Wakeups *float64 `json:"wakeups_per_acq,omitempty"`
	// Redis: looks on the re-check timer, and wake messages received by
	// the sessions, handed to a waiter or not.
	Rechecks     *float64 `json:"rechecks_per_acq,omitempty"`
	WakeMessages *float64 `json:"wake_messages_per_acq,omitempty"`
}

// countBetween counts the acquisitions, of those made at the given times,
// that fall in [from, to): window.load's divisor.
func countBetween(acquiredAt []time.Time) func(from, to time.Time) int {
	return func(from, to time.Time) int {
		n := 0
		for _, t := range acquiredAt {
			if !t.Before(from) && t.Before(to) {
				n++
			}
		}
		return n
	}
}

// loadBetween turns two snapshots into per-acquisition figures.
func loadBetween(before, after snapshot, acquisitions int) *load {
	l := &load{Acquisitions: acquisitions, ByMethod: map[string]float64{}}
	if acquisitions == 0 {
		return l
	}
	n := float64(acquisitions)
	for k, v := range after.series {
		d := v - before.series[k]
		if d == 0 {
			continue
		}
		switch seriesName(k) {
		case metricRequests:
			m := label(k, "grpc_method")
			if m == keepaliveMethod {
				continue
			}
			l.Requests += d / n
			l.ByMethod[m] += d / n
		case metricWatchEvents:
			l.WatchEvents += d / n
		}
	}
	return l
}
