package zkio

import (
	"github.com/go-zookeeper/zk"
)

// aroundExists passes requests to the connection, and runs before ahead
// of each Exists of path and after once it is answered.
type aroundExists struct {
	requestConn
	path          string
	before, after func()
}

func (c *aroundExists) Exists(path string) (bool, *zk.Stat, error) {
	if path != c.path {
		return c.requestConn.Exists(path)
	}
	c.before()
	ok, st, err := c.requestConn.Exists(path)
	c.after()
	return ok, st, err
}

// AroundExists makes s run before ahead of each Exists of path sent
// through its requests (a barrier Wait's look on an earlier Wait's watch,
// see spares.look) and after once it is answered, before the look goes
// on. Set it while no call runs on s.
func AroundExists(s *Session, path string, before, after func()) {
	s.requests = &aroundExists{requestConn: s.requests, path: path, before: before, after: after}
}
