package zkio

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/internal/inflight"
)

// forgetNode has a helper delete a znode this session wrote and no longer
// wants, retrying while the session lives: a delete that failed with the
// connection never leaves a znode under a live session. The helper is
// counted in c (see countedHelper; nil counts nothing), so that the Close
// of the primitive that wrote the znode waits for its retries too.
func (s *Session) forgetNode(c *inflight.Counter, node string) {
	s.countedHelper(c, func() { _, _ = s.deleteNode(context.Background(), nil, node, true) })
}

// deleteNode deletes node and, if again is set, tries again while the
// delete fails with the connection, until ctx, stop or the session ends;
// err is nil once node is gone, else the last delete's error. gone reports
// that node was gone before this deleteNode: its first delete found it
// absent (a delete tried again after one the connection cut short may have
// deleted it itself, and says nothing).
func (s *Session) deleteNode(ctx context.Context, stop <-chan struct{}, node string, again bool) (gone bool, err error) {
	for first := true; ; first = false {
		err := s.requests.Delete(node, -1)
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, zk.ErrNoNode):
			return first, nil
		case !again || !retryable(err) || !s.pause(ctx, stop):
			return false, err
		}
	}
}

// dropNode deletes node, once, now; if that fails, a helper counted in c
// goes on trying (see forgetNode).
func (s *Session) dropNode(c *inflight.Counter, node string) {
	if _, err := s.deleteNode(context.Background(), nil, node, false); err != nil {
		s.forgetNode(c, node)
	}
}

// forget has a helper counted in c (see forgetNode) delete the znode named
// with guid under path, if a create whose outcome is unknown made one,
// trying again while the listing fails with the connection, until the
// session ends.
func (s *Session) forget(c *inflight.Counter, path, guid string) {
	s.countedHelper(c, func() {
		for s.forgetOnce(c, path, guid) && s.sleep(retryPause) {
		}
	})
}

// forgetNow is forget's first try, now: if its listing fails with the
// connection, forget goes on with it.
func (s *Session) forgetNow(c *inflight.Counter, path, guid string) {
	if s.forgetOnce(c, path, guid) {
		s.forget(c, path, guid)
	}
}

// forgetOnce lists path and deletes (dropNode, its retries counted in c)
// the znode named with guid among its children; again reports that the
// listing failed with the connection.
func (s *Session) forgetOnce(c *inflight.Counter, path, guid string) (again bool) {
	children, _, err := s.conn.Children(path)
	if err != nil {
		return retryable(err)
	}
	for _, child := range children {
		if strings.HasPrefix(child, protectedPrefix+guid) {
			s.dropNode(c, path+"/"+child)
		}
	}
	return false
}

// sleep waits d; false if the session ended first.
func (s *Session) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.quit:
		return false
	}
}
