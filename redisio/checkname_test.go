package redisio_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testkit"
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
	testkit.CheckNames(t, testkit.NameRule{
		Check:    redisio.CheckName,
		Sentinel: primitives.ErrInvalidArgument,
		Make: map[string]func(string) error{
			"NewLock":          testkit.Made(t, func(n string) (any, error) { return redisio.NewLock(cli, n, bad) }),
			"NewRWLock":        testkit.Made(t, func(n string) (any, error) { return redisio.NewRWLock(cli, n, bad) }),
			"NewElection":      testkit.Made(t, func(n string) (any, error) { return redisio.NewElection(cli, n, bad) }),
			"NewSemaphore":     testkit.Made(t, func(n string) (any, error) { return redisio.NewSemaphore(cli, n, 1, bad) }),
			"NewBarrier":       testkit.Made(t, func(n string) (any, error) { return redisio.NewBarrier(cli, n, bad) }),
			"NewDoubleBarrier": testkit.Made(t, func(n string) (any, error) { return redisio.NewDoubleBarrier(cli, n, 2, bad) }),
		},
		Past: func(err error) bool { return strings.Contains(err.Error(), "TTL 1ns below") },
	}, []testkit.NameCase{
		{Name: "/jobs/nightly"},
		{Name: "jobs"},
		{Name: "/jobs/"},
		{Name: "disco/sessionsx"},
		{Name: "/disco/session"},
		{Name: "/" + strings.Repeat("x", 1023)},
		{Name: "", Refusal: `name ""`},
		{Name: "/", Refusal: `name "/"`},
		{Name: "/" + strings.Repeat("x", 1024), Refusal: "(1025 bytes): more than 1024"},
		{Name: "disco/session", Refusal: "which disco keeps for its sessions"},
		{Name: "disco/session/1", Refusal: "which disco keeps for its sessions"},
		{Name: "disco/sessions", Refusal: "which disco keeps for its sessions"},
	})
}
