package redisio_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/redisio"
)

// CheckName, which needs no client, refuses exactly the names the
// constructors refuse, in their words, wrapping ErrInvalidArgument: given
// a client of no server and a TTL they refuse, a constructor fails on the
// name if CheckName refuses it, and otherwise on the TTL, having
// contacted nothing.
func TestCheckName(t *testing.T) {
	cli := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer cli.Close()
	bad := redisio.WithTTL(time.Nanosecond)
	for _, c := range []struct {
		name, why string // why: "" if accepted
	}{
		{"/jobs/nightly", ""},
		{"jobs", ""},
		{"/jobs/", ""},
		{"disco/sessionsx", ""},
		{"/disco/session", ""},
		{"/" + strings.Repeat("x", 1023), ""},
		{"", `name ""`},
		{"/", `name "/"`},
		{"/" + strings.Repeat("x", 1024), "(1025 bytes): more than 1024"},
		{"disco/session", "which disco keeps for its sessions"},
		{"disco/session/1", "which disco keeps for its sessions"},
		{"disco/sessions", "which disco keeps for its sessions"},
	} {
		err := redisio.CheckName(c.name)
		show := c.name[:min(len(c.name), 20)]
		if c.why == "" {
			if err != nil {
				t.Errorf("CheckName(%q): %v, want nil", show, err)
			}
		} else if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("CheckName(%q): %v, want an error saying %q wrapping ErrInvalidArgument", show, err, c.why)
		}
		for ctor, cerr := range map[string]error{
			"NewLock":          second(redisio.NewLock(cli, c.name, bad)),
			"NewRWLock":        second(redisio.NewRWLock(cli, c.name, bad)),
			"NewElection":      second(redisio.NewElection(cli, c.name, bad)),
			"NewSemaphore":     second(redisio.NewSemaphore(cli, c.name, 1, bad)),
			"NewBarrier":       second(redisio.NewBarrier(cli, c.name, bad)),
			"NewDoubleBarrier": second(redisio.NewDoubleBarrier(cli, c.name, 2, bad)),
		} {
			switch {
			case cerr == nil:
				t.Errorf("%s(%q) succeeded", ctor, show)
			case err != nil && !strings.Contains(cerr.Error(), err.Error()):
				t.Errorf("%s(%q): %v; want CheckName's %q", ctor, show, cerr, err)
			case err == nil && !strings.Contains(cerr.Error(), "TTL 1ns below"):
				t.Errorf("%s(%q): %v; want it to take the name CheckName takes, and refuse the TTL", ctor, show, cerr)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }
