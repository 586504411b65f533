package guard

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// outageLogEvery is how often, at most, a guard logs the rejections of an
// outage of its store or verifier after the first one (see outageLog).
const outageLogEvery = 10 * time.Second

// outageLog logs, to a guard's logger, the requests its middleware and
// interceptors reject because one dependency (the store, or the verifier)
// failed, at a rate bounded whatever the request rate: the first rejection
// of an outage with its error, at Warn; then at most one line per
// outageLogEvery, at Warn, with the number of rejections since the last
// line and the latest error; and, once the dependency answers again, one
// line at Info with the outage's rejections and how long it lasted. So an
// outage costs a few log lines, not one per request. Its zero value is
// ready to use.
type outageLog struct {
	failing atomic.Bool // an outage was logged, and the dependency has not answered since

	mu       sync.Mutex
	began    time.Time // the outage's first rejection
	logged   time.Time // its last line
	rejected int64     // its rejections
	unlogged int64     // its rejections since its last line
}

// reject logs (or counts) a rejection at now, for err.
func (o *outageLog) reject(l *zap.Logger, err error, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.Load() {
		o.failing.Store(true)
		o.began, o.logged, o.rejected, o.unlogged = now, now, 1, 0
		l.Warn("guard: request rejected", zap.Error(err))
		return
	}
	o.rejected++
	o.unlogged++
	if now.Sub(o.logged) < outageLogEvery {
		return
	}
	l.Warn("guard: requests rejected", zap.Int64("rejected", o.unlogged),
		zap.Duration("outage", now.Sub(o.began)), zap.Error(err))
	o.logged, o.unlogged = now, 0
}

// answered ends the outage, if one was logged, at now(): the dependency,
// what, answered. Without an outage it is one atomic load.
func (o *outageLog) answered(l *zap.Logger, what string, now func() time.Time) {
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing.Load() {
		return
	}
	o.failing.Store(false)
	l.Info("guard: "+what+" answers again", zap.Int64("rejected", o.rejected),
		zap.Duration("outage", now().Sub(o.began)))
}

// The outages a guard logs (config.outages): of its store, of its
// verifier.
const (
	storeOutage = iota
	verifierOutage
)

// outageOf returns which outage err, a rejection, is part of, if any.
func outageOf(err error) (int, error, bool) {
	switch {
	case errors.Is(err, ErrStore):
		return storeOutage, ErrStore, true
	case errors.Is(err, ErrUnverified):
		return verifierOutage, ErrUnverified, true
	}
	return 0, nil, false
}

// answered ends an outage of the store (storeOutage) or the verifier
// logged to the guard's logger: it answered.
func (c *config) answered(outage int) {
	if c.logger == nil {
		return
	}
	what := "the mark store"
	if outage == verifierOutage {
		what = "the verifier"
	}
	c.outages[outage].answered(c.logger, what, time.Now)
}
