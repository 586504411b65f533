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

// GrantHolder is implemented by a Subscriber that can tell at any moment,
// without waiting, which grant it holds: from before the acquisition that
// made the grant returns until before the service reports the grant's end
// (a release returns, or Released or Lost is sent). A GrantToken following
// a GrantHolder stamps a grant exactly over that span, rather than from its
// Acquired event's arrival to its Released or Lost event's. The services of
// disco's backends implement it; a backend author's should.
type GrantHolder interface {
	CurrentGrant() (a Acquired, ok bool)
}

// GrantToken is the token of a primitive's current grant: from the moment
// the acquisition returns until the primitive reports that the grant
// ended (its release returns, or Released or Lost is sent), then none. Its
// Token and Scoped methods are a fencing.TokenSource and a
// fencing.ScopedTokenSource, so a client that stamps requests through
// fencing.NewTransport (or the interceptors) stamps the grant's token as
// soon as Lock (Acquire, Campaign) returns and stops sending the moment its
// primitive reports that the grant ended, with no hand-written bookkeeping.
// (Following a Subscriber that is not a GrantHolder, it goes by the events
// as they arrive, a little after the calls return.)
//
// A grant that ended without the service knowing yet (a paused process) is
// still stamped, which is what the resource's guard is for. Suspended does
// not stop the stamping (the grant may still be intact); Lost does.
type GrantToken struct {
	scope  string
	scoper GrantScoper // nil: every grant's scope is scope
	holder GrantHolder // nil: the events alone say the grant
	cur    atomic.Pointer[heldGrant]
	done   chan struct{}
	// stop is FollowGrants' ctx.Done(): once it is closed the token is
	// none, before follow has noticed.
	stop <-chan struct{}
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
// token. So does a nil ctx, which is bad input (there is no error to
// return it with): FollowGrants then subscribes to nothing, starts no
// goroutine, and returns a GrantToken whose Done is closed already.
func FollowGrants(ctx context.Context, scope string, s Subscriber) *GrantToken {
	g := &GrantToken{scope: scope, done: make(chan struct{})}
	if ctx == nil || s == nil {
		close(g.done)
		return g
	}
	g.stop = ctx.Done()
	g.scoper, _ = s.(GrantScoper)
	g.holder, _ = s.(GrantHolder)
	go g.follow(SubscribeHolds(ctx, s))
	return g
}

// SubscribeHolds subscribes to the events of s's own grants: through
// s.SubscribeHolds if s offers it (driver.Shell's, which does not count as
// a listener, so that an election followed for its grants need not follow
// who leads), else through Subscribe. The channel closes as Subscribe's.
// A nil ctx or a nil s is bad input: s is not asked, and the channel is
// closed already, as a Subscribe given a nil ctx returns it.
func SubscribeHolds(ctx context.Context, s Subscriber) <-chan Event {
	if ctx == nil || s == nil {
		closed := make(chan Event)
		close(closed)
		return closed
	}
	if hs, ok := s.(interface {
		SubscribeHolds(ctx context.Context) <-chan Event
	}); ok {
		return hs.SubscribeHolds(ctx)
	}
	return s.Subscribe(ctx)
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

// now returns the grant to stamp, nil if none.
func (g *GrantToken) now() *heldGrant {
	select {
	case <-g.stop: // nil, never ready, for a GrantToken that follows nothing
		return nil
	case <-g.done:
		return nil
	default:
	}
	cur := g.cur.Load()
	if g.holder == nil {
		return cur
	}
	a, ok := g.holder.CurrentGrant()
	switch {
	case !ok:
		return nil
	case cur != nil && cur.created == a.Created && cur.token == a.Token:
		return cur
	}
	// The grant's Acquired is still on its way to follow.
	h := &heldGrant{token: a.Token, created: a.Created, scope: g.scope}
	if g.scoper != nil {
		if h.scope, ok = g.scoper.GrantScope(a); !ok {
			return nil
		}
	}
	return h
}

// Token returns the current grant's token, or 0 when there is none. It is
// a fencing.TokenSource.
func (g *GrantToken) Token() fencing.Token {
	if c := g.now(); c != nil {
		return c.token
	}
	return 0
}

// Scoped returns the scope and the current grant's token (0 when there is
// none). The scope is the one given to FollowGrants, or, following a
// GrantScoper, the current grant's (the given one when there is none). It
// is a fencing.ScopedTokenSource.
func (g *GrantToken) Scoped() (string, fencing.Token) {
	if c := g.now(); c != nil {
		return c.scope, c.token
	}
	return g.scope, 0
}

// Done is closed when GrantToken stops following (ctx ended or the service
// is done), or from the start for one that follows nothing (FollowGrants
// given a nil s or a nil ctx); its token is then none for good.
func (g *GrantToken) Done() <-chan struct{} { return g.done }
