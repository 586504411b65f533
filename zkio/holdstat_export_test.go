package zkio

import "github.com/go-zookeeper/zk"

// heldStats passes requests to the connection, except that each exists
// (an acquisition's read of its own znode's creation zxid) waits until
// go_ is closed before it is sent; entered is poked as one waits.
type heldStats struct {
	requestConn
	entered chan struct{}
	go_     chan struct{}
}

func (c *heldStats) Exists(path string) (bool, *zk.Stat, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.go_
	return c.requestConn.Exists(path)
}

// HoldStats makes s's exists requests wait, before s's first acquisition,
// until send is called; waiting is poked when one waits.
func HoldStats(s *Session) (waiting <-chan struct{}, send func()) {
	hs := &heldStats{requestConn: s.requests, entered: make(chan struct{}, 1), go_: make(chan struct{})}
	s.requests = hs
	return hs.entered, func() { close(hs.go_) }
}
