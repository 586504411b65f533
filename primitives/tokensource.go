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

// GrantScoper is implemented by a Subscriber whose grants do not all share
// the primitive's name as their fencing scope: a semaphore, each of whose
// slots is its own scope ("<name>#<slot>", semaphore.Grant.Scope). A
// GrantToken following such a Subscriber asks it for the scope of each
// grant it announces, and stamps that scope beside the grant's token.
// GrantScope returns the scope of the grant a announced; ok is false when
// that grant is already over (the Subscriber no longer knows it), and the
// GrantToken then stamps nothing for it. The semaphores of disco's backends
// implement it; a backend author's must too.
type GrantScoper interface {
	GrantScope(a Acquired) (scope string, ok bool)
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
	scope  string
	scoper GrantScoper // nil: every grant's scope is scope
	cur    atomic.Pointer[heldGrant]
	done   chan struct{}
}

type heldGrant struct {
	token   fencing.Token
	created int64
	scope   string
}

// FollowGrants subscribes to s and follows its grants until ctx ends or s
// is done (its event channel closes); from then on the token is none. scope
// is the primitive's name as passed to its constructor (the prefix), the
// scope that Scoped reports. If s is also a GrantScoper (a semaphore), each
// grant's scope is the one s gives for it instead (a semaphore's: the scope
// of the grant's slot, "<name>#<slot>"), so the token is stamped with the
// scope a guard of that slot checks. Call it before acquiring, so that the
// Acquired event is not missed. A nil s gives a GrantToken that never has a
// token.
func FollowGrants(ctx context.Context, scope string, s Subscriber) *GrantToken {
	g := &GrantToken{scope: scope, done: make(chan struct{})}
	if s == nil {
		close(g.done)
		return g
	}
	g.scoper, _ = s.(GrantScoper)
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
			h := &heldGrant{token: e.Token, created: e.Created, scope: g.scope}
			if g.scoper != nil {
				var ok bool
				if h.scope, ok = g.scoper.GrantScope(e); !ok {
					g.cur.Store(nil) // already over: nothing to stamp
					continue
				}
			}
			g.cur.Store(h)
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
// none). The scope is the one given to FollowGrants, or, following a
// GrantScoper, the current grant's (the given one when there is none). It
// is a fencing.ScopedTokenSource.
func (g *GrantToken) Scoped() (string, fencing.Token) {
	if c := g.cur.Load(); c != nil {
		return c.scope, c.token
	}
	return g.scope, 0
}

// Done is closed when GrantToken stops following (ctx ended or the service
// is done); its token is then none for good.
func (g *GrantToken) Done() <-chan struct{} { return g.done }
