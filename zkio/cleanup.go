package zkio

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// forgetNode has a helper delete a znode this session wrote and no longer
// wants, retrying while the session lives: a delete that failed with the
// connection never leaves a znode under a live session.
func (s *Session) forgetNode(node string) {
	s.helper(func() { _, _ = s.deleteNode(context.Background(), nil, node, true) })
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

// forget has a helper delete the znode named with guid under path, if a
// create whose outcome is unknown made one.
func (s *Session) forget(path, guid string) {
	s.helper(func() {
		for {
			children, _, err := s.conn.Children(path)
			if err == nil {
				for _, c := range children {
					if strings.HasPrefix(c, protectedPrefix+guid) {
						s.forgetNode(path + "/" + c)
					}
				}
				return
			}
			if !retryable(err) || !s.sleep(retryPause) {
				return
			}
		}
	})
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
