package zkio

import (
	"sync/atomic"

	"github.com/go-zookeeper/zk"
)

// losingCreates passes creates and lookups to the connection, except that
// it loses the reply to the first create or transaction (it is applied,
// the caller hears the connection closed) and fails the first lookup after
// it, a listing or an exists (the connection is still down).
type losingCreates struct {
	requestConn
	createLost, listingFailed atomic.Bool
}

func (c *losingCreates) Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error) {
	p, err := c.requestConn.Create(path, data, flags, acl)
	if err == nil && c.createLost.CompareAndSwap(false, true) {
		return "", zk.ErrConnectionClosed
	}
	return p, err
}

func (c *losingCreates) Multi(ops ...any) ([]zk.MultiResponse, error) {
	r, err := c.requestConn.Multi(ops...)
	if err == nil && c.createLost.CompareAndSwap(false, true) {
		return nil, zk.ErrConnectionClosed
	}
	return r, err
}

func (c *losingCreates) Exists(path string) (bool, *zk.Stat, error) {
	if c.createLost.Load() && c.listingFailed.CompareAndSwap(false, true) {
		return false, nil, zk.ErrConnectionClosed
	}
	return c.requestConn.Exists(path)
}

func (c *losingCreates) Children(path string) ([]string, *zk.Stat, error) {
	if c.createLost.Load() && c.listingFailed.CompareAndSwap(false, true) {
		return nil, nil, zk.ErrConnectionClosed
	}
	return c.requestConn.Children(path)
}

// LoseFirstCreateReply makes s lose the reply to its next queue create and
// fail the listing after it (see losingCreates), before s's first
// acquisition; done reports that both happened.
func LoseFirstCreateReply(s *Session) (done func() bool) {
	lc := &losingCreates{requestConn: s.requests}
	s.requests = lc
	return func() bool { return lc.createLost.Load() && lc.listingFailed.Load() }
}
