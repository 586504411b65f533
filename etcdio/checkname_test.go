package etcdio_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/primitives"
)

// CheckName, which needs no client, refuses exactly the names the
// constructors refuse, in their words, wrapping ErrInvalidArgument: given
// a nil client, a constructor fails on the name if CheckName refuses it,
// and otherwise on the client.
func TestCheckName(t *testing.T) {
	for _, c := range []struct {
		name, why string // why: "" if accepted
	}{
		{"/jobs/nightly", ""},
		{"jobs", ""},
		{"/jobs/", ""},
		{"/" + strings.Repeat("x", 1023), ""},
		{"", "empty prefix"},
		{"/", `prefix "/"`},
		{"/" + strings.Repeat("x", 1024), "prefix of 1025 bytes, more than 1024"},
	} {
		err := etcdio.CheckName(c.name)
		show := c.name[:min(len(c.name), 20)]
		if c.why == "" {
			if err != nil {
				t.Errorf("CheckName(%q): %v, want nil", show, err)
			}
		} else if !errors.Is(err, etcdio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("CheckName(%q): %v, want an error saying %q wrapping ErrInvalidArgument", show, err, c.why)
		}
		for ctor, cerr := range map[string]error{
			"NewLock":          second(etcdio.NewLock(nil, c.name)),
			"NewRWLock":        second(etcdio.NewRWLock(nil, c.name)),
			"NewElection":      second(etcdio.NewElection(nil, c.name)),
			"NewSemaphore":     second(etcdio.NewSemaphore(nil, c.name, 1)),
			"NewBarrier":       second(etcdio.NewBarrier(nil, c.name)),
			"NewDoubleBarrier": second(etcdio.NewDoubleBarrier(nil, c.name, 2)),
		} {
			switch {
			case cerr == nil:
				t.Errorf("%s(nil, %q) succeeded", ctor, show)
			case err != nil && !strings.Contains(cerr.Error(), err.Error()):
				t.Errorf("%s(nil, %q): %v; want CheckName's %q", ctor, show, cerr, err)
			case err == nil && !strings.Contains(cerr.Error(), "nil etcd client"):
				t.Errorf("%s(nil, %q): %v; want it to take the name CheckName takes, and refuse the nil client", ctor, show, cerr)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }
