package redisio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/faultproxy"
	"github.com/ahrtr/disco/internal/testserver"
)

// TestConnBroken: a refused dial, a reset or a connection closed by the
// server is a broken connection (the holders are suspended at once); a
// timeout, the refresh's own deadline or an error reply from Redis is not.
func TestConnBroken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, refused := net.DialTimeout("tcp", addr, time.Second)
	if refused == nil {
		t.Skip("a closed port accepted a connection")
	}
	cases := []struct {
		name   string
		err    error
		broken bool
	}{
		{"refused", refused, true},
		{"refused, wrapped", fmt.Errorf("refresh: %w", refused), true},
		{"closed by the server", io.EOF, true},
		{"cut short", io.ErrUnexpectedEOF, true},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"cancelled", context.Canceled, false},
		{"error reply", redis.Nil, false},
		{"other", errors.New("ERR something"), false},
	}
	for _, c := range cases {
		if got := connBroken(c.err); got != c.broken {
			t.Errorf("%s (%v): connBroken = %v, want %v", c.name, c.err, got, c.broken)
		}
	}
}

// TestRefreshReplyLostKeepsSession: one refresh whose reply is lost (its
// connection goes silent after Redis ran it) while Redis answers every
// other request does not lose the session: the next refresh goes out on
// time, on another connection, and confirms the session. The refresher
// waited for the client's own ReadTimeout (5 s by default) and go-redis's
// resends, sending nothing meanwhile, so a session with a TTL under about
// 4.5 s was lost.
func TestRefreshReplyLostKeepsSession(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := newClient(t, r)
	if err := refreshScript.Load(ctx, admin).Err(); err != nil {
		t.Fatal(err)
	}
	loser := new(replyLoser)
	// The client's default timeouts (ReadTimeout 3 s, longer than the TTL).
	cli := redis.NewClient(&redis.Options{Addr: r.Addr, Dialer: loser.dial})
	t.Cleanup(func() { cli.Close() })
	s, err := NewSession(cli, WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	loser.armBytes(refreshScript.Hash(), 1)
	deadline := time.Now().Add(10 * time.Second)
	for loser.losses() == 0 && time.Now().Before(deadline) {
		select {
		case <-s.Done():
			t.Fatalf("session ended before a refresh lost its reply: %v", s.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if loser.losses() == 0 {
		t.Fatal("no refresh lost its reply")
	}
	select {
	case <-s.Done():
		t.Fatalf("one refresh reply lost, Redis answering: session ended: %v", s.Err())
	case <-time.After(3 * ttl):
	}
	if n := admin.Exists(ctx, s.Key()).Val(); n != 1 {
		t.Fatalf("session key gone")
	}
}

// TestSlowRefreshesKeepSession: while every reply of Redis takes longer
// than a third of the TTL but less than the TTL (a slow disk under
// appendfsync always, a loaded server), refreshes go out every TTL/3
// anyway, each is acknowledged in time to count by the time it was sent,
// and the session lives. A refresher that waited for each refresh before
// the next, or gave up on one after a third of the TTL, lost the session
// within a TTL.
func TestSlowRefreshesKeepSession(t *testing.T) {
	r := testserver.StartRedis(t)
	const ttl = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := refreshScript.Load(ctx, newClient(t, r)).Err(); err != nil {
		t.Fatal(err) // so that each refresh is one round trip
	}
	px, err := faultproxy.Listen("127.0.0.1:0", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	// Connections opened before the replies slow down, each with no
	// handshake to wait for later: only the refreshes' replies are slow.
	cli := redis.NewClient(&redis.Options{Addr: px.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { cli.Close() })
	var conns []*redis.Conn
	for range 4 {
		c := cli.Conn()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close() // back to the pool
	}
	s, err := NewSession(cli, WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	px.DelayRx(700 * time.Millisecond) // each reply: over TTL/3, under TTL
	defer px.UndelayRx()
	select {
	case <-s.Done():
		t.Fatalf("every reply 0.7 s late, the TTL %v: session ended: %v", ttl, s.Err())
	case <-time.After(4 * ttl):
	}
}
