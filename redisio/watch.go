package redisio

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// readLeader reads the election's head.
func (v *service) readLeader(ctx context.Context) (election.Leadership, error) {
	return v.s.readLeader(ctx, v.name, v.queue, v.granted, v.wake)
}

// readLeader reads the head of the election on name, whose keys are queue
// and granted and whose channel is wake.
func (s *Session) readLeader(ctx context.Context, name, queue, granted, wake string) (election.Leadership, error) {
	res, err := leaderScript.Run(ctx, s.cli, []string{queue, granted}, wake).Slice()
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

// leaderWatch is the one reader of an election's leader for all the
// session's services on its name: a change of the queue (a message on the
// name's channel) or the recheck timer makes it read once, and every
// service of the name gets the read. With many candidates on one session,
// a change costs one read, not one per candidate.
type leaderWatch struct {
	name, queue, granted, wake string
	recheck                    time.Duration
	kick                       chan struct{} // a change: read now
	services                   map[*service]struct{}
	stop                       context.CancelFunc
}

// watchLeader adds v, an election, to the leader watch of its name,
// starting the watch if v is the first. Loop only.
func (s *Session) watchLeader(v *service) {
	w := s.leaderWatches[v.name]
	if w == nil {
		ctx, stop := context.WithCancel(context.Background())
		w = &leaderWatch{name: v.name, queue: v.queue, granted: v.granted, wake: v.wake, recheck: v.recheck(),
			kick: make(chan struct{}, 1), services: map[*service]struct{}{}, stop: stop}
		s.leaderWatches[v.name] = w
		s.helpers.Add(1)
		go s.followLeader(ctx, w, v.Spec().Metrics, v.Spec().Kind)
	}
	w.services[v] = struct{}{}
}

// unwatchLeader takes v out of its name's leader watch, and stops the
// watch once nobody is left. Loop only.
func (s *Session) unwatchLeader(v *service) {
	w := s.leaderWatches[v.name]
	if w == nil {
		return
	}
	delete(w.services, v)
	if len(w.services) == 0 {
		delete(s.leaderWatches, v.name)
		w.stop()
	}
}

// kickLeader asks the leader watch of name to read now, counted as one
// wakeup of its session. Loop only.
func (s *Session) kickLeader(name string, m *metrics.Metrics, kind string) {
	if w := s.leaderWatches[name]; w != nil {
		select {
		case w.kick <- struct{}{}:
			m.Woken(kind, 1)
		default:
		}
	}
}

// followLeader is a leader watch's helper: it reads the leader whenever it
// is kicked, and at the recheck interval, and posts each read to the
// watch's services.
func (s *Session) followLeader(ctx context.Context, w *leaderWatch, m *metrics.Metrics, kind string) {
	defer s.helpers.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-w.kick:
		case <-t.C:
			if !first {
				m.Rechecked(kind)
			}
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		}
		t.Reset(w.recheck)
		seq := s.leaderReads.Add(1)
		l, err := s.readLeader(ctx, w.name, w.queue, w.granted, w.wake)
		if err != nil {
			s.log.Debug("redisio: watch leader", zap.String("name", w.name), zap.Error(err))
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
