package primitives

import (
	"context"
	"sync/atomic"

	"github.com/ahrtr/disco/fencing"
)

// Subscriber is what a lock, rwlock or election service offers to follow
// its events.
type Subscriber interface {
	Subscribe(ctx context.Context) <-chan Event
}

// GrantToken is the token of a primitive's current grant, kept up to date
// from its events: from Acquired until the Released or Lost of that same
// grant, then none. Its Token and Scoped methods are a fencing.TokenSource
// and a fencing.ScopedTokenSource, so a client that stamps requests through
// fencing.NewTransport (or the interceptors) stops sending them the moment
// its primitive reports that the grant ended, with no hand-written
// bookkeeping.
//
// It follows the events as they arrive: a grant that ended without the
// service knowing yet (a paused process) is still stamped, which is what the
// resource's guard is for. Suspended does not stop the stamping (the grant
// may still be intact); Lost does.
type GrantToken struct {
	scope string
	cur   atomic.Pointer[heldGrant]
	done  chan struct{}
}

type heldGrant struct {
	token   fencing.Token
	created int64
}

// FollowGrants subscribes to s and follows its grants until ctx ends or s
// is done (its event channel closes); from then on the token is none. scope
// is the primitive's name as passed to its constructor (the prefix), the
// scope that Scoped reports. Call it before acquiring, so that the Acquired
// event is not missed. A nil s gives a GrantToken that never has a token.
func FollowGrants(ctx context.Context, scope string, s Subscriber) *GrantToken {
	g := &GrantToken{scope: scope, done: make(chan struct{})}
	if s == nil {
		close(g.done)
		return g
	}
	events := s.Subscribe(ctx)
	go g.follow(events)
	return g
}

func (g *GrantToken) follow(events <-chan Event) {
	defer close(g.done)
	defer g.cur.Store(nil)
	for ev := range events {
		switch e := ev.(type) {
		case Acquired:
			g.cur.Store(&heldGrant{token: e.Token, created: e.Created})
		case Released:
			g.end(e.Token, e.Created)
		case Lost:
			g.end(e.Token, e.Created)
		default: // Suspended, Resumed, LeaderChanged and kinds yet to come
		}
	}
}

// end forgets the current grant if it is the one that ended.
func (g *GrantToken) end(t fencing.Token, created int64) {
	cur := g.cur.Load()
	if cur == nil {
		return
	}
	if cur.created == created && (created != 0 || cur.token == t) {
		g.cur.CompareAndSwap(cur, nil)
	}
}

// Token returns the current grant's token, or 0 when there is none. It is
// a fencing.TokenSource.
func (g *GrantToken) Token() fencing.Token {
	if c := g.cur.Load(); c != nil {
		return c.token
	}
	return 0
}

// Scoped returns the scope and the current grant's token (0 when there is
// none). It is a fencing.ScopedTokenSource.
func (g *GrantToken) Scoped() (string, fencing.Token) {
	return g.scope, g.Token()
}

// Done is closed when GrantToken stops following (ctx ended or the service
// is done); its token is then none for good.
func (g *GrantToken) Done() <-chan struct{} { return g.done }
