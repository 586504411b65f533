package zkio_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/zkio"
)

// CheckName, which needs no session, refuses exactly the paths the
// constructors refuse, in their words, wrapping ErrInvalidArgument: given
// no servers, a constructor fails on the path if CheckName refuses it, and
// otherwise on the servers.
func TestCheckName(t *testing.T) {
	for _, c := range []struct {
		name, why string // why: "" if accepted
	}{
		{"/jobs/nightly", ""},
		{"/jobs/", ""},
		{"/a/lock-x", ""},
		{"/" + strings.Repeat("x", 1023), ""},
		{"", "empty path"},
		{"/", `path "/"`},
		{"jobs", "must start with /"},
		{"/" + strings.Repeat("x", 1024), "(1025 bytes): more than 1024"},
		{"/a//b", "empty segment"},
		{"/a/..", `segment ".."`},
		{"/a\x01b", "which ZooKeeper refuses"},
		{"/zookeeper/x", "ZooKeeper's own"},
		{"/a/b" + zkio.EpochSuffix, "epoch znode"},
		{"/a/_c_0f-lock-0000000001/b", "named as a lock"},
	} {
		err := zkio.CheckName(c.name)
		show := c.name[:min(len(c.name), 20)]
		if c.why == "" {
			if err != nil {
				t.Errorf("CheckName(%q): %v, want nil", show, err)
			}
		} else if !errors.Is(err, zkio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("CheckName(%q): %v, want an error saying %q wrapping ErrInvalidArgument", show, err, c.why)
		}
		for ctor, cerr := range map[string]error{
			"NewLock":          second(zkio.NewLock(nil, c.name)),
			"NewRWLock":        second(zkio.NewRWLock(nil, c.name)),
			"NewElection":      second(zkio.NewElection(nil, c.name)),
			"NewSemaphore":     second(zkio.NewSemaphore(nil, c.name, 1)),
			"NewBarrier":       second(zkio.NewBarrier(nil, c.name)),
			"NewDoubleBarrier": second(zkio.NewDoubleBarrier(nil, c.name, 2)),
		} {
			switch {
			case cerr == nil:
				t.Errorf("%s(nil, %q) succeeded", ctor, show)
			case err != nil && !strings.Contains(cerr.Error(), err.Error()):
				t.Errorf("%s(nil, %q): %v; want CheckName's %q", ctor, show, cerr, err)
			case err == nil && !strings.Contains(cerr.Error(), "no ZooKeeper servers"):
				t.Errorf("%s(nil, %q): %v; want it to take the path CheckName takes, and refuse no servers", ctor, show, cerr)
			}
		}
	}
}
