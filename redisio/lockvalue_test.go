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
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// A lock made WithValue stores the value in its holder's and its waiters'
// hashes (field v, where a candidate's value goes), so that a reader of
// the name's queue sees who holds and who waits.
func TestLockValue(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	cli := newClient(t, r)
	const name = "/values/lock"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, redisio.WithValue("host-a:101")))
	b := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, redisio.WithValue("host-b:202")))
	g, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := b.Lock(ctx); got <- err }()
	var queue []string
	testkit.Eventually(t, 10*time.Second, "the waiter's hold", func() bool {
		queue, err = cli.ZRange(ctx, name+"/queue", 0, -1).Result()
		return err == nil && len(queue) == 2
	})
	for i, want := range []string{"host-a:101", "host-b:202"} {
		if v, err := cli.HGet(ctx, queue[i], "v").Result(); err != nil || v != want {
			t.Errorf("hold %s: value %q (%v), want %q", queue[i], v, err, want)
		}
	}
	if queue[0] != g.Key {
		t.Errorf("first hold %s, the holder's is %s", queue[0], g.Key)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A value over the largest accepted, or WithValue on another constructor
// than NewLock, is refused with an error wrapping
// primitives.ErrInvalidArgument, and Redis stays empty.
func TestLockValueRefused(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	cli := newClient(t, r)
	ctx := context.Background()
	if err := cli.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const name = "/values/refused"
	cases := map[string]func() error{
		"over WithMaxValueSize": func() error {
			_, err := redisio.NewLock(cli, name, redisio.WithValue("12345678901"), redisio.WithMaxValueSize(10))
			return err
		},
		"over DefaultMaxValueSize": func() error {
			_, err := redisio.NewLock(cli, name, redisio.WithValue(strings.Repeat("x", redisio.DefaultMaxValueSize+1)))
			return err
		},
		"election": func() error { _, err := redisio.NewElection(cli, name, redisio.WithValue("v")); return err },
		"rwlock":   func() error { _, err := redisio.NewRWLock(cli, name, redisio.WithValue("v")); return err },
		"session":  func() error { _, err := redisio.NewSession(cli, redisio.WithValue("v")); return err },
	}
	for what, c := range cases {
		err := c()
		if !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an error wrapping primitives.ErrInvalidArgument", what, err)
		}
		t.Logf("%s: %.200v", what, err)
	}
	if n, err := cli.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("refused constructors left %d keys in Redis (%v)", n, err)
	}
	l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, redisio.WithValue("1234567890"), redisio.WithMaxValueSize(10)))
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := l.Lock(cctx); err != nil {
		t.Fatalf("a value at the limit: %v", err)
	}
}
