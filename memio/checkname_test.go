package memio_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
)

// CheckName refuses exactly the names the constructors refuse, in their
// words, wrapping ErrInvalidArgument, and the constructors take every name
// it accepts.
func TestCheckName(t *testing.T) {
	st := memio.NewStore()
	for _, c := range []struct {
		name, why string // why: "" if accepted
	}{
		{"/jobs/nightly", ""},
		{"jobs", ""},
		{"/jobs/", ""},
		{"/" + strings.Repeat("x", 1023), ""},
		{"", "empty name"},
		{"/", `name "/"`},
		{"/" + strings.Repeat("x", 1024), "name of 1025 bytes, more than 1024"},
		{"/a\xffb", "not UTF-8"},
	} {
		err := memio.CheckName(c.name)
		show := c.name[:min(len(c.name), 20)]
		if c.why == "" {
			if err != nil {
				t.Errorf("CheckName(%q): %v, want nil", show, err)
			}
		} else if !errors.Is(err, memio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("CheckName(%q): %v, want an error saying %q wrapping ErrInvalidArgument", show, err, c.why)
		}
		for ctor, made := range map[string]func() (any, error){
			"NewLock":          func() (any, error) { return memio.NewLock(st, c.name) },
			"NewRWLock":        func() (any, error) { return memio.NewRWLock(st, c.name) },
			"NewElection":      func() (any, error) { return memio.NewElection(st, c.name) },
			"NewSemaphore":     func() (any, error) { return memio.NewSemaphore(st, c.name, 1) },
			"NewBarrier":       func() (any, error) { return memio.NewBarrier(st, c.name) },
			"NewDoubleBarrier": func() (any, error) { return memio.NewDoubleBarrier(st, c.name, 2) },
		} {
			p, cerr := made()
			if cl, ok := p.(io.Closer); ok && cerr == nil {
				if err := cl.Close(); err != nil {
					t.Errorf("%s(%q): Close: %v", ctor, show, err)
				}
			}
			switch {
			case err == nil && cerr != nil:
				t.Errorf("%s(%q): %v; want it to take the name CheckName takes", ctor, show, cerr)
			case err != nil && (cerr == nil || !strings.Contains(cerr.Error(), err.Error())):
				t.Errorf("%s(%q): %v; want CheckName's %q", ctor, show, cerr, err)
			}
		}
	}
}
