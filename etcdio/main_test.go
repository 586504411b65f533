package etcdio_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/etcdio/etcdtest"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

// newClient returns a client of the test server, closed when t ends.
func newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return etcdtest.NewClient(t)
}

// testCtx returns a context that ends when t does or after d.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// prefixOf returns a prefix no other test uses. When t ends, an rwlock's
// epoch key on it is removed, so tests leave nothing in a cluster given by
// ETCD_ENDPOINTS.
func prefixOf(t testing.TB) string {
	prefix := "/test/" + t.Name()
	t.Cleanup(func() {
		cli, err := embedded.NewClient(etcdtest.Endpoints())
		if err != nil {
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cli.Delete(ctx, prefix+etcdio.EpochSuffix)
	})
	return prefix
}

// countKeys returns how many keys exist under prefix + "/".
func countKeys(t testing.TB, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// etcdSession returns a session of etcd's own concurrency package, for the
// interoperability tests, closed when t ends.
func etcdSession(t testing.TB, cli *clientv3.Client) *concurrency.Session {
	t.Helper()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
