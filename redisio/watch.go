package redisio

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/ctxtime"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// readLeader reads the election's head.
func (v *service) readLeader(ctx context.Context) (election.Leadership, error) {
	return v.s.readLeader(ctx, v.s.cli, v.name, v.queue, v.granted, v.wake)
}

// readLeaderUntil reads the leader, repeating a read that failed after
// readRetry, until one succeeds, ctx ends or the service does; it returns
// the read's sequence number (see applyLeaderLoop) with it.
func (v *service) readLeaderUntil(ctx context.Context) (uint64, election.Leadership, error) {
	ctx, cancel := ctxtime.WithDone(ctx, v.Done())
	defer cancel()
	for {
		seq := v.s.leaderReads.Add(1)
		l, err := v.readLeader(ctx)
		if err == nil {
			return seq, l, nil
		}
		if !ctxtime.Sleep(ctx, readRetry) {
			return 0, l, err
		}
	}
}

// readRetry is the pause before a failed read of the leader is repeated.
const readRetry = 100 * time.Millisecond

// readLeader reads the head of the election on name, whose keys are queue
// and granted and whose channel is wake.
func (s *Session) readLeader(ctx context.Context, cli *redis.Client, name, queue, granted, wake string) (election.Leadership, error) {
	res, err := leaderScript.Run(ctx, cli, []string{queue, granted}, wake).Slice()
	if err != nil {
		return election.Leadership{}, fmt.Errorf("redisio: election %q: read leader: %w", name, err)
	}
	if len(res) < 4 {
		return election.Leadership{}, nil
	}
	key, _ := res[0].(string)
	value, _ := res[1].(string)
	created, _ := res[2].(int64)
	lease, _ := res[3].(int64)
	if key == "" || created == 0 {
		return election.Leadership{}, fmt.Errorf("redisio: election %q: malformed leader %v", name, res)
	}
	return election.Leadership{Key: key, Value: value, FencingToken: fencing.Token(created), LeaseID: lease, Created: created}, nil
}

// leaderWatch is the one reader of an election's leader for the session's
// services on its name that someone listens to (see followLoop): while it
// runs, the session subscribes to the name's channel, and a message there
// (a change of the queue) or the recheck timer makes it read once, and
// every service in it gets the read. With many candidates on one session,
// a change costs one read, not one per candidate; a session none of whose
// services on the name is listened to has no watch, no subscription to
// the name's channel and no reads.
type leaderWatch struct {
	name, queue, granted, wake string
	kind                       string // the services' kind, the metrics' label
	recheck                    time.Duration
	kick                       chan struct{} // a change, or a new service: read now
	services                   map[*service]struct{}
	// metrics are the distinct metrics of services, each told once of
	// what the watch does for them all.
	metrics []*metrics.Metrics
	stop    context.CancelFunc
}

// followLoop adds v, an election, to its name's leader watch while
// someone listens to it (its listeners: subscriptions and observations),
// and takes it out when nobody does. Called when the count turns, in any
// order: it acts on the count as it is now. Loop only.
func (v *service) followLoop() {
	if v.Ended() {
		return
	}
	if v.Spec().Listeners.Listening() {
		v.s.watchLeader(v)
	} else {
		v.s.unwatchLeader(v)
	}
}

// watchLeader adds v to the leader watch of its name, starting the watch
// if v is the first; a service added to a running watch has it read at
// once, so that its following begins with a read made after it joined.
// Loop only.
func (s *Session) watchLeader(v *service) {
	w := s.leaderWatches[v.wake]
	if w == nil {
		ctx, stop := context.WithCancel(context.Background())
		w = &leaderWatch{name: v.name, queue: v.queue, granted: v.granted, wake: v.wake, kind: v.Spec().Kind, recheck: v.recheck(),
			kick: make(chan struct{}, 1), services: map[*service]struct{}{}, stop: stop}
		s.leaderWatches[v.wake] = w
		s.goHelper(func() { s.followLeader(ctx, w) })
	} else if _, ok := w.services[v]; ok {
		return
	} else {
		w.read()
	}
	w.services[v] = struct{}{}
	w.countMetrics()
}

// unwatchLeader takes v out of its name's leader watch, and stops the
// watch (and its subscription) once nobody is left. Loop only.
func (s *Session) unwatchLeader(v *service) {
	w := s.leaderWatches[v.wake]
	if w == nil {
		return
	}
	if _, ok := w.services[v]; !ok {
		return
	}
	delete(w.services, v)
	w.countMetrics()
	if len(w.services) == 0 {
		delete(s.leaderWatches, v.wake)
		w.stop()
	}
}

// countMetrics recomputes w.metrics from its services. Loop only.
func (w *leaderWatch) countMetrics() {
	w.metrics = w.metrics[:0]
	for v := range w.services {
		if m := v.Spec().Metrics; m != nil && !slices.Contains(w.metrics, m) {
			w.metrics = append(w.metrics, m)
		}
	}
}

// read asks the watch to read now, unless a read is asked for already;
// it reports whether this call asked. Any goroutine.
func (w *leaderWatch) read() bool {
	select {
	case w.kick <- struct{}{}:
		return true
	default:
		return false
	}
}

// wokenLoop is a message on the watch's channel: one wake message for the
// session, and one wakeup if it asks for a read (one read follows however
// many messages come before it). Loop only.
func (w *leaderWatch) wokenLoop() {
	asked := w.read()
	for _, m := range w.metrics {
		m.WakeMessage(w.kind)
		if asked {
			m.Woken(w.kind, 1)
		}
	}
}

// followLeader is a leader watch's helper: it subscribes the session to
// the name's channel, then reads the leader at once, whenever it is
// kicked, and at the recheck interval, and posts each read to the watch's
// services. When the watch stops it drops the subscription.
func (s *Session) followLeader(ctx context.Context, w *leaderWatch) {
	// The subscription comes before the first read, so that a change
	// after that read sends a message the session hears (bar one lost
	// around a reconnect, which the recheck finds).
	if err := s.subscribe(ctx, w.wake); err != nil {
		s.log.Debug("redisio: watch leader: subscribe", zap.String("name", w.name), zap.Error(err))
	}
	defer s.unsubscribe(w.wake)
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-w.kick:
		case <-t.C:
			if !first {
				s.mb.Post(func() {
					for _, m := range w.metrics {
						m.Rechecked(w.kind)
					}
				})
			}
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		}
		t.Reset(w.recheck)
		seq := s.leaderReads.Add(1)
		// A read on the session's own behalf: one under way when Close
		// begins ends within the TTL (see ownClient).
		rctx, cancel := s.ownCtx(ctx, opTimeout)
		var l election.Leadership
		cli, err := s.ownClient(time.Time{})
		if err == nil {
			l, err = s.readLeader(rctx, cli, w.name, w.queue, w.granted, w.wake)
		}
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("redisio: watch leader", zap.String("name", w.name), zap.Error(err))
			}
			continue
		}
		s.mb.Post(func() {
			for v := range w.services {
				v.applyLeaderLoop(seq, l)
			}
		})
	}
}

// applyLeaderLoop records a leader read, unless a later read has been
// applied, and reports a change. Loop only.
func (v *service) applyLeaderLoop(seq uint64, l election.Leadership) {
	if v.Ended() || seq <= v.leaderSeq {
		return
	}
	v.leaderSeq = seq
	old := v.leader
	if old.Key == l.Key && old.Value == l.Value && old.FencingToken == l.FencingToken && old.Created == l.Created {
		return
	}
	v.leader = l
	v.Spec().Metrics.LeaderChanged()
	v.Publish(primitives.LeaderChanged{Key: l.Key, Value: l.Value, Token: l.FencingToken})
	v.obs.Publish(l)
}
