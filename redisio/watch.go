package redisio

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
)

// readLeader reads the election's head.
func (v *service) readLeader(ctx context.Context) (election.Leadership, error) {
	res, err := leaderScript.Run(ctx, v.s.cli, []string{v.queue, v.granted}, v.wake).Slice()
	if err != nil {
		return election.Leadership{}, v.errf("read leader: %w", err)
	}
	if len(res) < 4 {
		return election.Leadership{}, nil
	}
	key, _ := res[0].(string)
	value, _ := res[1].(string)
	created, _ := res[2].(int64)
	lease, _ := res[3].(int64)
	if key == "" || created == 0 {
		return election.Leadership{}, fmt.Errorf("redisio: election %q: malformed leader %v", v.name, res)
	}
	return election.Leadership{Key: key, Value: value, FencingToken: fencing.Token(created), LeaseID: lease, Created: created}, nil
}

// watch is an election's helper: it reads the leader whenever the
// session's pub/sub says the queue changed, and at the recheck interval,
// and posts what it read to the loop.
func (v *service) watch() {
	defer v.s.helpers.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v.s.helpers.Add(1)
	go func() {
		defer v.s.helpers.Done()
		select {
		case <-v.Done():
		case <-v.s.quit:
		}
		cancel()
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for first := true; ; first = false {
		select {
		case <-v.watchWake:
		case <-t.C:
			v.rechecked(first)
		case <-ctx.Done():
			return
		}
		t.Reset(v.recheck())
		seq := v.leaderReads.Add(1)
		l, err := v.readLeader(ctx)
		if err != nil {
			v.s.log.Debug("redisio: watch leader", zap.String("name", v.name), zap.Error(err))
			continue
		}
		v.s.mb.Post(func() { v.applyLeaderLoop(seq, l) })
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
