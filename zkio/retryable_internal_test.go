package zkio

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/go-zookeeper/zk"
)

// A request whose write failed on a broken connection gets the socket's
// own error from the client (not ErrConnectionClosed): it never reached
// ZooKeeper, and is tried again on the next connection like any request
// that failed with the connection. Before, a Resign sent as the client
// found its connection dead returned "write: broken pipe".
func TestRetryableSocketError(t *testing.T) {
	for _, err := range []error{
		zk.ErrConnectionClosed,
		zk.ErrNoServer,
		&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)},
		&net.OpError{Op: "write", Net: "tcp", Err: os.ErrDeadlineExceeded},
	} {
		if !retryable(err) {
			t.Errorf("retryable(%v) = false, want true", err)
		}
	}
	for _, err := range []error{zk.ErrNoNode, zk.ErrNodeExists, zk.ErrBadVersion, errors.New("other")} {
		if retryable(err) {
			t.Errorf("retryable(%v) = true, want false", err)
		}
	}
}
