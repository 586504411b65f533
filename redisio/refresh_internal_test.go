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
