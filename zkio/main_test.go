package zkio_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/internal/testserver"
)

// noLeaks fails t if goroutines started during it outlive it.
func noLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// startZooKeeper starts a ZooKeeper server for t (or skips t).
func startZooKeeper(t *testing.T) []string {
	t.Helper()
	return []string{testserver.StartZooKeeper(t).Addr}
}

// adminConn returns a plain ZooKeeper client, closed when t ends.
func adminConn(t testing.TB, servers []string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// closedAtEnd fails t on err, and closes s when t ends.
func closedAtEnd[S interface{ Close() error }](t testing.TB) func(S, error) S {
	return func(s S, err error) S {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}
