package reach_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/redisio"
	"github.com/ahrtr/disco/zkio"
)

// silent returns an address that accepts connections and never answers.
func silent(t *testing.T) string {
	addr, _ := testkit.SilentEndpoint(t)
	return addr
}

// Every backend's constructor, given an endpoint that does not answer or
// a host that does not exist, fails within its bound (WithContext) with a
// message that names the endpoint and says which of the two it was.
func TestConstructorsNameUnreachableEndpoint(t *testing.T) {
	testkit.NoLeaks(t)
	const bound = time.Second
	backends := map[string]func(ctx context.Context, addr string) error{
		"etcd": func(ctx context.Context, addr string) error {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{addr}, Logger: zap.NewNop()})
			if err != nil {
				return err
			}
			defer cli.Close()
			_, err = etcdio.NewLock(cli, "/x", etcdio.WithContext(ctx))
			return err
		},
		"ZooKeeper": func(ctx context.Context, addr string) error {
			_, err := zkio.NewLock([]string{addr}, "/x", zkio.WithContext(ctx))
			return err
		},
		"Redis": func(ctx context.Context, addr string) error {
			cli := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			defer cli.Close()
			_, err := redisio.NewLock(cli, "/x", redisio.WithContext(ctx))
			return err
		},
	}
	for service, construct := range backends {
		for _, c := range []struct{ what, addr, want string }{
			{"silent", silent(t), "did not answer within"},
			{"no such host", "disco-no-such-host.invalid:2379", `no such host "disco-no-such-host.invalid"`},
		} {
			t.Run(service+"/"+c.what, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				start := time.Now()
				err := construct(ctx, c.addr)
				took := time.Since(start)
				if err == nil {
					t.Fatal("constructed against an unreachable endpoint")
				}
				msg := err.Error()
				if !strings.Contains(msg, service+" at "+c.addr) || !strings.Contains(msg, c.want) {
					t.Errorf("error %q: want it to name %q and say %q", msg, service+" at "+c.addr, c.want)
				}
				// The bound, the one lookup after it that tells an unknown
				// host from a silent one (1 s at most), and on ZooKeeper
				// the client's Close (1 s at most).
				if took > bound+2*time.Second+500*time.Millisecond {
					t.Errorf("failed after %v, bound %v", took, bound)
				}
				t.Logf("after %v: %v", took.Round(time.Millisecond), err)
			})
		}
	}
}
