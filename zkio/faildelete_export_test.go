package zkio

import (
	"sync/atomic"

	"github.com/go-zookeeper/zk"
)

// failingDeletes passes requests to the connection, except that while
// failing is set it fails every delete unsent, as a connection that is
// down would, and counts them.
type failingDeletes struct {
	requestConn
	failing atomic.Bool
	failed  atomic.Int32
}

func (c *failingDeletes) Delete(path string, version int32) error {
	if c.failing.Load() {
		c.failed.Add(1)
		return zk.ErrConnectionClosed
	}
	return c.requestConn.Delete(path, version)
}

// FailDeletes makes s's deletes that go through its requests (see
// Session.requests) fail until heal is called, before s's first
// acquisition; failed reports how many failed.
func FailDeletes(s *Session) (failed func() int, heal func()) {
	fd := &failingDeletes{requestConn: s.requests}
	fd.failing.Store(true)
	s.requests = fd
	return func() int { return int(fd.failed.Load()) }, func() { fd.failing.Store(false) }
}
