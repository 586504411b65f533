package zkio

import "github.com/go-zookeeper/zk"

// heldCreates passes requests to the connection, except that each create
// waits until go_ is closed before it is sent, as a request stuck behind
// others on a slow connection would; entered is poked as a create waits.
type heldCreates struct {
	requestConn
	entered chan struct{}
	go_     chan struct{}
}

func (c *heldCreates) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	<-c.go_
	return c.requestConn.Create(path, data, flags, acl)
}

// HoldCreates makes s's queue creates wait, before s's first acquisition,
// until send is called; waiting is poked when one waits.
func HoldCreates(s *Session) (waiting <-chan struct{}, send func()) {
	hc := &heldCreates{requestConn: s.requests, entered: make(chan struct{}, 1), go_: make(chan struct{})}
	s.requests = hc
	return hc.entered, func() { close(hc.go_) }
}
