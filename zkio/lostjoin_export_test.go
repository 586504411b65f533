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
}

func (c *lostJoin) Multi(ops ...any) ([]zk.MultiResponse, error) {
	r, err := c.requestConn.Multi(ops...)
	if err == nil && c.lost.CompareAndSwap(false, true) {
		return nil, zk.ErrConnectionClosed
	}
	return r, err
}

func (c *lostJoin) Exists(path string) (bool, *zk.Stat, error) {
	if c.lost.Load() && !c.healed.Load() {
		return false, nil, zk.ErrConnectionClosed
	}
	return c.requestConn.Exists(path)
}

// LoseJoinReply makes the first join transaction of d (on a session of its
// own, before its first Enter) land with its reply lost, and the lookups of
// its znode after it fail until heal; lost reports that the reply was lost.
func LoseJoinReply(d barrier.DoubleBarrier) (lost func() bool, heal func()) {
	s := d.(*zkDoubleBarrier).s
	c := &lostJoin{requestConn: s.requests}
	s.requests = c
	return c.lost.Load, func() { c.healed.Store(true) }
}
