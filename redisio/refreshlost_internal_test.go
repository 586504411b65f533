package redisio

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/internal/testserver"
)

// TestRefreshReplyLostKeepsSession: one refresh whose reply is lost (its
// connection goes silent after Redis ran it) while Redis answers every
// other request does not lose the session: the refresh gives up after a
// third of the TTL and the next one, on another connection, confirms the
// session. The refresher waited for the client's own ReadTimeout (3 s by
// default) and go-redis's resends, sending nothing meanwhile, so a
// session with a TTL under about 4.5 s was lost.
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
