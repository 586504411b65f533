package testkit

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ahrtr/disco/primitives"
)

// NameCase is a name and what a backend's name check says of it.
type NameCase struct {
	Name string
	// Refusal is "" for a name the backend takes, and otherwise text its
	// refusal must contain.
	Refusal string
}

// NameRule describes a backend's exported name check and its constructors.
type NameRule struct {
	// Check is the backend's CheckName.
	Check func(name string) error
	// Sentinel is the backend's own ErrInvalidArgument, which every
	// refusal wraps besides primitives.ErrInvalidArgument.
	Sentinel error
	// Make maps each constructor's name to a call of it on name that
	// closes whatever it made and returns the constructor's error.
	Make map[string]func(name string) error
	// Past reports whether a constructor's error on a name Check takes is
	// the one the test set up for after the name check (a nil client, a
	// TTL out of range); nil, when the constructors are to succeed.
	Past func(err error) bool
}

// CheckNames checks, for every case, that r.Check refuses exactly the
// case's refusals, in the case's words, wrapping both sentinels; that every
// constructor refuses those names with Check's own error; and that every
// constructor gets past the names Check takes.
func CheckNames(t *testing.T, r NameRule, cases []NameCase) {
	t.Helper()
	for _, c := range cases {
		err := r.Check(c.Name)
		show := c.Name[:min(len(c.Name), 20)]
		if c.Refusal == "" {
			if err != nil {
				t.Errorf("CheckName(%q): %v, want nil", show, err)
			}
		} else if !errors.Is(err, r.Sentinel) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.Refusal) {
			t.Errorf("CheckName(%q): %v, want an error saying %q wrapping ErrInvalidArgument", show, err, c.Refusal)
		}
		for ctor, construct := range r.Make {
			cerr := construct(c.Name)
			switch {
			case err != nil && (cerr == nil || !strings.Contains(cerr.Error(), err.Error())):
				t.Errorf("%s(%q): %v; want CheckName's %q", ctor, show, cerr, err)
			case err == nil && r.Past == nil && cerr != nil:
				t.Errorf("%s(%q): %v; want it to take the name CheckName takes", ctor, show, cerr)
			case err == nil && r.Past != nil && (cerr == nil || !r.Past(cerr)):
				t.Errorf("%s(%q): %v; want it to take the name CheckName takes, and fail after it as set up", ctor, show, cerr)
			}
		}
	}
}

// Made returns a NameRule.Make function of construct: it calls construct,
// closes what it made (if it is an io.Closer), and returns construct's
// error.
func Made[T any](t *testing.T, construct func(name string) (T, error)) func(string) error {
	return func(name string) error {
		p, err := construct(name)
		if c, ok := any(p).(io.Closer); ok && err == nil {
			if cerr := c.Close(); cerr != nil {
				t.Errorf("Close of what was made on %q: %v", name[:min(len(name), 20)], cerr)
			}
		}
		return err
	}
}
