package zkio_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/internal/testserver"
)

// shared is the ZooKeeper server the package's tests share (each on its
// own paths), started by the first test that needs it.
var shared struct {
	once sync.Once
	dir  string
	zks  []*testserver.ZooKeeper
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, zk := range shared.zks {
		zk.Stop()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	// The tests run in parallel; every goroutine they started must be gone
	// once they all have ended.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startZooKeeper returns the shared ZooKeeper server's address, starting
// it if need be (or skips t if ZooKeeper is not installed).
func startZooKeeper(t testing.TB) []string {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "zkio-test-")
		if shared.err == nil {
			shared.zks, shared.err = testserver.LaunchZooKeeper(shared.dir, 1)
		}
	})
	if errors.Is(shared.err, testserver.ErrNotInstalled) {
		testserver.Missing(t, "ZooKeeper (with a Java runtime)", testserver.ZooKeeperInstall)
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return []string{shared.zks[0].Addr}
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
