package redisio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/redisio"
)

// TestBadInput: every bad argument is an error wrapping
// primitives.ErrInvalidArgument, never a panic, and leaves Redis empty.
func TestBadInput(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	cli := newClient(t, r)
	other := newClient(t, r)
	s, err := redisio.NewSession(other)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := cli.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 2000)
	cases := []struct {
		name string
		make func() error
	}{
		{"nil client lock", func() error { _, err := redisio.NewLock(nil, "a"); return err }},
		{"nil client election", func() error { _, err := redisio.NewElection(nil, "a"); return err }},
		{"nil client session", func() error { _, err := redisio.NewSession(nil); return err }},
		{"empty name", func() error { _, err := redisio.NewLock(cli, ""); return err }},
		{"slash name", func() error { _, err := redisio.NewElection(cli, "/"); return err }},
		{"long name", func() error { _, err := redisio.NewLock(cli, long); return err }},
		{"short TTL", func() error { _, err := redisio.NewLock(cli, "a", redisio.WithTTL(time.Millisecond)); return err }},
		{"session TTL", func() error { _, err := redisio.NewSession(cli, redisio.WithTTL(-time.Second)); return err }},
		{"nil option", func() error { _, err := redisio.NewLock(cli, "a", nil); return err }},
		{"TTL with a session", func() error {
			_, err := redisio.NewLock(cli, "a", redisio.WithSession(s), redisio.WithTTL(time.Second))
			return err
		}},
		{"suspend part with a session", func() error {
			_, err := redisio.NewLock(cli, "a", redisio.WithSession(s), redisio.WithSuspendAfter(0.3))
			return err
		}},
		{"suspend part 0", func() error { _, err := redisio.NewLock(cli, "a", redisio.WithSuspendAfter(0)); return err }},
		{"suspend part 1", func() error { _, err := redisio.NewSession(cli, redisio.WithSuspendAfter(1)); return err }},
		{"nil session", func() error { _, err := redisio.NewLock(cli, "a", redisio.WithSession(nil)); return err }},
		{"session of another client", func() error { _, err := redisio.NewLock(cli, "a", redisio.WithSession(s)); return err }},
		{"nil client semaphore", func() error { _, err := redisio.NewSemaphore(nil, "a", 2); return err }},
		{"semaphore of 0 permits", func() error { _, err := redisio.NewSemaphore(cli, "a", 0); return err }},
		{"reserved semaphore name", func() error { _, err := redisio.NewSemaphore(cli, "disco/sessions", 2); return err }},
		{"semaphore short TTL", func() error {
			_, err := redisio.NewSemaphore(cli, "a", 2, redisio.WithTTL(time.Millisecond))
			return err
		}},
		{"nil client barrier", func() error { _, err := redisio.NewBarrier(nil, "a"); return err }},
		{"reserved barrier name", func() error { _, err := redisio.NewBarrier(cli, "disco/session"); return err }},
		{"barrier with a session", func() error { _, err := redisio.NewBarrier(other, "a", redisio.WithSession(s)); return err }},
		{"barrier with a TTL", func() error { _, err := redisio.NewBarrier(cli, "a", redisio.WithTTL(time.Second)); return err }},
		{"nil client double barrier", func() error { _, err := redisio.NewDoubleBarrier(nil, "a", 2); return err }},
		{"double barrier count 0", func() error { _, err := redisio.NewDoubleBarrier(cli, "a", 0); return err }},
		{"double barrier empty name", func() error { _, err := redisio.NewDoubleBarrier(cli, "", 2); return err }},
		{"double barrier short TTL", func() error {
			_, err := redisio.NewDoubleBarrier(cli, "a", 2, redisio.WithTTL(time.Millisecond))
			return err
		}},
	}
	for _, c := range cases {
		err := c.make()
		if !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping ErrInvalidArgument", c.name, err)
		}
		if len(err.Error()) > 200 {
			t.Errorf("%s: error of %d bytes: %.80s...", c.name, len(err.Error()), err)
		}
	}
	if n, err := cli.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Fatalf("Redis holds %d keys after bad input (%v), want none", n, err)
	}
}
