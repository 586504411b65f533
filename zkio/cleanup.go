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
	s.helper(func() { _ = s.deleteNode(context.Background(), nil, node, true) })
}

// deleteNode deletes node and, if again is set, tries again while the
// delete fails with the connection, until ctx, stop or the session ends;
// nil once node is gone, else the last delete's error.
func (s *Session) deleteNode(ctx context.Context, stop <-chan struct{}, node string, again bool) error {
	for {
		err := s.requests.Delete(node, -1)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if !again || !retryable(err) || !s.pause(ctx, stop) {
			return err
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
