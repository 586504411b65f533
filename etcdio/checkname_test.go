package etcdio_test

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/internal/testkit"
)

// CheckName, which needs no client, refuses exactly the names the
// constructors refuse, in their words, wrapping ErrInvalidArgument: given
// a nil client, a constructor fails on the name if CheckName refuses it,
// and otherwise on the client.
func TestCheckName(t *testing.T) {
	var cli *clientv3.Client
	testkit.CheckNames(t, testkit.NameRule{
		Check:    etcdio.CheckName,
		Sentinel: etcdio.ErrInvalidArgument,
		Make: map[string]func(string) error{
			"NewLock":      testkit.Made(t, func(n string) (any, error) { return etcdio.NewLock(cli, n) }),
			"NewRWLock":    testkit.Made(t, func(n string) (any, error) { return etcdio.NewRWLock(cli, n) }),
			"NewElection":  testkit.Made(t, func(n string) (any, error) { return etcdio.NewElection(cli, n) }),
			"NewSemaphore": testkit.Made(t, func(n string) (any, error) { return etcdio.NewSemaphore(cli, n, 1) }),
			"NewBarrier":   testkit.Made(t, func(n string) (any, error) { return etcdio.NewBarrier(cli, n) }),
			"NewDoubleBarrier": testkit.Made(t, func(n string) (any, error) {
				return etcdio.NewDoubleBarrier(cli, n, 2)
			}),
		},
		Past: func(err error) bool { return strings.Contains(err.Error(), "nil etcd client") },
	}, []testkit.NameCase{
		{Name: "/jobs/nightly"},
		{Name: "jobs"},
		{Name: "/jobs/"},
		{Name: "/" + strings.Repeat("x", 1023)},
		{Name: "", Refusal: "empty prefix"},
		{Name: "/", Refusal: `prefix "/"`},
		{Name: "/" + strings.Repeat("x", 1024), Refusal: "prefix of 1025 bytes, more than 1024"},
	})
}
