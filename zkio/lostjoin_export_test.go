package zkio

import (
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/primitives/barrier"
)

// DBNode returns a double barrier party's znode ("" if none), taken at
// the party's turn.
func DBNode(d barrier.DoubleBarrier) string {
	p := d.(*zkDoubleBarrier)
	p.turn <- struct{}{}
	defer func() { <-p.turn }()
	return p.node
}

// lostJoin applies the first transaction and loses its reply; then every
// lookup of a znode through requests fails, as on a connection that is
// down, until heal.
type lostJoin struct {
	requestConn
	lost, healed atomic.Bool
	// listings: the listings of the barrier fail too, after the loss.
	listings bool
}

func (c *lostJoin) down() bool { return c.lost.Load() && !c.healed.Load() }

func (c *lostJoin) Children(path string) ([]string, *zk.Stat, error) {
	if c.listings && c.down() {
		return nil, nil, zk.ErrConnectionClosed
	}
	return c.requestConn.Children(path)
}

func (c *lostJoin) Multi(ops ...any) ([]zk.MultiResponse, error) {
	r, err := c.requestConn.Multi(ops...)
	if err == nil && c.lost.CompareAndSwap(false, true) {
		return nil, zk.ErrConnectionClosed
	}
	return r, err
}

func (c *lostJoin) Exists(path string) (bool, *zk.Stat, error) {
	if c.down() {
		return false, nil, zk.ErrConnectionClosed
	}
	return c.requestConn.Exists(path)
}

// LoseJoinReply makes the first join transaction of d (on a session of its
// own, before its first Enter) land with its reply lost, and the lookups of
// its znode after it fail until heal; lost reports that the reply was lost.
func LoseJoinReply(d barrier.DoubleBarrier) (lost func() bool, heal func()) {
	return loseJoin(d, false)
}

// LoseJoinAndListings is LoseJoinReply, and the barrier's listings fail
// too after the loss, until heal: a withdrawal cannot tell whether the
// znode was counted.
func LoseJoinAndListings(d barrier.DoubleBarrier) (lost func() bool, heal func()) {
	return loseJoin(d, true)
}

func loseJoin(d barrier.DoubleBarrier, listings bool) (lost func() bool, heal func()) {
	s := d.(*zkDoubleBarrier).s
	c := &lostJoin{requestConn: s.requests, listings: listings}
	s.requests = c
	return c.lost.Load, func() { c.healed.Store(true) }
}
