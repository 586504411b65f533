package memio_test

import (
	"strings"
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
)

// CheckName refuses exactly the names the constructors refuse, in their
// words, wrapping ErrInvalidArgument, and the constructors take every name
// it accepts.
func TestCheckName(t *testing.T) {
	st := memio.NewStore()
	testkit.CheckNames(t, testkit.NameRule{
		Check:    memio.CheckName,
		Sentinel: memio.ErrInvalidArgument,
		Make: map[string]func(string) error{
			"NewLock":          testkit.Made(t, func(n string) (any, error) { return memio.NewLock(st, n) }),
			"NewRWLock":        testkit.Made(t, func(n string) (any, error) { return memio.NewRWLock(st, n) }),
			"NewElection":      testkit.Made(t, func(n string) (any, error) { return memio.NewElection(st, n) }),
			"NewSemaphore":     testkit.Made(t, func(n string) (any, error) { return memio.NewSemaphore(st, n, 1) }),
			"NewBarrier":       testkit.Made(t, func(n string) (any, error) { return memio.NewBarrier(st, n) }),
			"NewDoubleBarrier": testkit.Made(t, func(n string) (any, error) { return memio.NewDoubleBarrier(st, n, 2) }),
		},
	}, []testkit.NameCase{
		{Name: "/jobs/nightly"},
		{Name: "jobs"},
		{Name: "/jobs/"},
		{Name: "/" + strings.Repeat("x", 1023)},
		{Name: "", Refusal: "empty name"},
		{Name: "/", Refusal: `name "/"`},
		{Name: "/" + strings.Repeat("x", 1024), Refusal: "name of 1025 bytes, more than 1024"},
		{Name: "/a\xffb", Refusal: "not UTF-8"},
	})
}
