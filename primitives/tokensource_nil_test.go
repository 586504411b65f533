package primitives_test

import (
	"context"
	"testing"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/memio"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
)

// TestTokenSourceBadInput: FollowGrants and SubscribeHolds given a nil
// context (or SubscribeHolds a nil Subscriber) do not panic, on the
// caller's goroutine or on one of their own, and subscribe to nothing:
// SubscribeHolds returns a closed channel; FollowGrants a GrantToken that
// is done already and stamps nothing, even while its primitive holds a
// grant.
func TestTokenSourceBadInput(t *testing.T) {
	var nilCtx context.Context
	ctx := context.Background()
	for _, c := range []struct {
		name string
		// follow: FollowGrants, else SubscribeHolds; nilSubscriber: pass
		// nil for the Subscriber instead of the lock.
		follow        bool
		ctx           context.Context
		nilSubscriber bool
	}{
		{name: "FollowGrants nil ctx", follow: true, ctx: nilCtx},
		{name: "SubscribeHolds nil ctx", ctx: nilCtx},
		{name: "SubscribeHolds nil Subscriber", ctx: ctx, nilSubscriber: true},
		{name: "SubscribeHolds nil ctx and Subscriber", ctx: nilCtx, nilSubscriber: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			testkit.NoLeaks(t)
			l := testkit.ClosedAtEnd[lock.Service](t)(memio.NewLock(memio.NewStore(), "/a"))
			var s primitives.Subscriber = l
			if c.nilSubscriber {
				s = nil
			}
			var src *primitives.GrantToken
			var events <-chan primitives.Event
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panicked: %v", r)
					}
				}()
				if c.follow {
					src = primitives.FollowGrants(c.ctx, "/a", s)
				} else {
					events = primitives.SubscribeHolds(c.ctx, s)
				}
			}()
			if !c.follow {
				select {
				case ev, ok := <-events:
					if ok {
						t.Fatalf("SubscribeHolds' channel sent %v, want it closed", ev)
					}
				default:
					t.Fatal("SubscribeHolds' channel is open, want it closed")
				}
				return
			}
			select {
			case <-src.Done():
			default:
				t.Fatal("the GrantToken is not done: it follows something")
			}
			g, err := l.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tok := src.Token(); tok != 0 {
				t.Errorf("Token() = %d while the lock holds token %d, want 0", tok, g.Token())
			}
			if scope, tok := src.Scoped(); scope != "/a" || tok != 0 {
				t.Errorf("Scoped() = %q, %d, want \"/a\", 0", scope, tok)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
