package zkio_test

import (
	"strings"
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/zkio"
)

// CheckName, which needs no session, refuses exactly the paths the
// constructors refuse, in their words, wrapping ErrInvalidArgument: given
// no servers, a constructor fails on the path if CheckName refuses it, and
// otherwise on the servers.
func TestCheckName(t *testing.T) {
	testkit.CheckNames(t, testkit.NameRule{
		Check:    zkio.CheckName,
		Sentinel: zkio.ErrInvalidArgument,
		Make: map[string]func(string) error{
			"NewLock":          testkit.Made(t, func(p string) (any, error) { return zkio.NewLock(nil, p) }),
			"NewRWLock":        testkit.Made(t, func(p string) (any, error) { return zkio.NewRWLock(nil, p) }),
			"NewElection":      testkit.Made(t, func(p string) (any, error) { return zkio.NewElection(nil, p) }),
			"NewSemaphore":     testkit.Made(t, func(p string) (any, error) { return zkio.NewSemaphore(nil, p, 1) }),
			"NewBarrier":       testkit.Made(t, func(p string) (any, error) { return zkio.NewBarrier(nil, p) }),
			"NewDoubleBarrier": testkit.Made(t, func(p string) (any, error) { return zkio.NewDoubleBarrier(nil, p, 2) }),
		},
		Past: func(err error) bool { return strings.Contains(err.Error(), "no ZooKeeper servers") },
	}, []testkit.NameCase{
		{Name: "/jobs/nightly"},
		{Name: "/jobs/"},
		{Name: "/a/lock-x"},
		{Name: "/" + strings.Repeat("x", 1023)},
		{Name: "", Refusal: "empty path"},
		{Name: "/", Refusal: `path "/"`},
		{Name: "jobs", Refusal: "must start with /"},
		{Name: "/" + strings.Repeat("x", 1024), Refusal: "(1025 bytes): more than 1024"},
		{Name: "/a//b", Refusal: "empty segment"},
		{Name: "/a/..", Refusal: `segment ".."`},
		{Name: "/a\x01b", Refusal: "which ZooKeeper refuses"},
		{Name: "/zookeeper/x", Refusal: "ZooKeeper's own"},
		{Name: "/a/b" + zkio.EpochSuffix, Refusal: "epoch znode"},
		{Name: "/a/_c_0f-lock-0000000001/b", Refusal: "named as a lock"},
	})
}
