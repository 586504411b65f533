package etcdio

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/primitives"
)

// An Unlock of a grant whose key the hold's watch saw go, before the lease
// check that tells why has answered, settles as a release that finds its
// key gone does: it asks whether the lease lives, and a revoked lease
// makes it fail with ErrLost (the hold Lost with the session), not with
// ErrNotHeld.
func TestReleaseOfAVanishedGrantAsksTheLease(t *testing.T) {
	cli, admin := etcdtest.NewClient(t), etcdtest.NewClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := NewSession(cli, WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := NewLock(cli, "/test/"+t.Name(), WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	g, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	svc := l.(lockService).service
	// As the hold's watch does when the key goes: the grant is marked
	// vanished and the lease check is under way (here: never answers).
	if _, err := call(ctx, s, func(r actor.Reply[struct{}]) {
		svc.vanished = g.Created
		s.checking = true
		r.Answer(struct{}{}, nil)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Revoke(ctx, s.LeaseID()); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, primitives.ErrLost) {
		t.Fatalf("Unlock of a grant seen vanished, its lease revoked: %v, want an error wrapping ErrLost", err)
	}
}
