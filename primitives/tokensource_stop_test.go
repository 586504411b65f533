package primitives_test

import (
	"context"
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestGrantTokenStopsWithItsContext: once the context given to
// FollowGrants has ended, the token is none at once, although the grant is
// still held: a client that stops following must stop stamping, not go on
// until the following goroutine notices.
func TestGrantTokenStopsWithItsContext(t *testing.T) {
	testkit.NoLeaks(t)
	l := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(memio.NewStore(), "/a"))
	for i := range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		src := primitives.FollowGrants(ctx, "/a", l)
		g, err := l.Lock(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if tok := src.Token(); tok != g.Token() {
			t.Fatalf("run %d: Token() = %d while holding token %d", i, tok, g.Token())
		}
		cancel()
		if tok := src.Token(); tok != 0 {
			t.Fatalf("run %d: Token() = %d after FollowGrants' context ended, want 0", i, tok)
		}
		if s, tok := src.Scoped(); tok != 0 || s != "/a" {
			t.Fatalf("run %d: Scoped() = %q, %d after FollowGrants' context ended, want \"/a\", 0", i, s, tok)
		}
		<-src.Done()
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
