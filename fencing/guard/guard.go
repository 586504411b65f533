// Package guard is the resource side of fencing: it keeps a high-water mark
// of the fencing tokens a resource has seen and rejects requests that carry a
// token below it.
//
//	g := guard.New(guard.WithStore(marks))                   // marks: a MarkStore, durable across restarts
//	http.Handle("/orders", g.HTTPMiddleware(ordersHandler))   // 409 for a stale token, 428 for none
//	srv := grpc.NewServer(grpc.UnaryInterceptor(g.UnaryInterceptor()))
//
//	k := guard.NewKeyed(guard.WithStore(marks)) // one mark per lock name (scope)
//	err := k.Check(scope, t)
//
// # Guarantees
//
// Disco's coordination primitives issue tokens that strictly increase with
// every new grant, and clients carry the token of their current grant on
// every request (see package [github.com/ahrtr/disco/fencing]). Given that,
// a Guard guarantees:
//
//   - Its mark never goes down. [Guard.Check] and [Guard.Admit] accept a token
//     t >= mark and raise the mark to t; they reject t < mark with an error
//     wrapping [fencing.ErrTokenStale] that names both numbers. Once any
//     request with token T has been seen, no request with a token below T is
//     accepted again by this Guard.
//   - Tokens equal to the mark are all accepted, concurrently: readers of an
//     rwlock that share one token never exclude each other. A Check with a
//     token equal to the mark does no atomic write (one load, one compare),
//     so it scales across cores.
//   - [Guard.Admit] closes the check-then-act window that a bare Check leaves
//     open. With Check, a request can pass the check, be overtaken by a
//     request with a higher token, and still apply its effect afterwards.
//     With Admit, a request runs with a context that is cancelled (with a
//     cause wrapping fencing.ErrTokenStale) the moment a higher token is
//     seen, and a request with a higher token is admitted only after every
//     in-flight request with a lower token has called its done function. So
//     the critical sections of different tokens never overlap, provided the
//     handlers stop (and call done) when their context is cancelled, and do
//     not act on the resource after calling done.
//
// [Guard.HTTPMiddleware], [Guard.UnaryInterceptor] and
// [Guard.StreamInterceptor] apply Admit to every request.
//
// # Persisting the mark
//
// A Guard keeps its mark in memory. If the resource restarts with a fresh
// Guard, the mark is 0 again, and a zombie client still holding an old token
// (paused, partitioned, unaware that its grant ended) would be accepted
// again: the protection would be silently gone. A resource that outlives its
// process must therefore keep its mark durably. Two ways:
//
//   - [WithStore]: the guard raises the mark in a [MarkStore] (a directory of
//     files or a SQL table, package markstore; etcd, etcdio.MarkStore)
//     before it accepts a token above it, and reads it back after a restart.
//     Each new grant costs one durable write; what a token equal to the mark
//     costs depends on whether other guards share the store (see below). A
//     store that fails or does not answer is a rejection wrapping
//     [ErrStore], never a hang: every wait on the store is bounded by the
//     request's context and by [WithStoreTimeout] ([DefaultStoreTimeout]
//     for Check). The middleware and interceptors tell the client only
//     that the store failed (503, Unavailable), and log the store's error
//     to [WithLogger]'s logger.
//   - By hand: persist the mark alongside the data it protects and
//     atomically with it (in the same transaction, the same row, the same
//     file write), so that no write is ever durable without the mark that
//     admitted it, and pass it to [WithInitialMark] after a restart.
//     [Guard.Mark] reports the current value.
//
// # Several guards on one store: the replicas of a resource
//
// A resource often runs as several replicas (three API servers in front of
// one database), each with its own guard. Guards built WithStore on one
// store (one directory on one host, one SQL table, one etcd prefix) fence
// as one resource: no guard accepts a token below a token any of them
// accepted. Each request meets the store, which arbitrates: a token above
// the guard's mark is raised in the store, which reports its mark (one
// round trip with a [RaiseLoader], else Raise then Load), and a token
// equal to the guard's mark is compared with a read of the store's mark.
// A stored mark above the token, raised by another replica, becomes this
// guard's mark: the token is rejected as stale and this guard's requests
// in flight with lower tokens are cancelled, as if it had seen the higher
// token itself.
//
// What it costs per request: one store read for a token at the mark (a
// file read, a SELECT, a linearizable etcd Get), shared by the requests of
// a scope that arrive while one read is in flight (each is answered by a
// read that began after it arrived, never an older one, so at most one
// read of a scope is in flight per guard, but for reads every request
// gave up on, which a store that ignores its context may leave running:
// the next read does not wait for up to four of them), and one round trip
// per raise.
// What it does not do: a guard's Admit drains the requests of lower tokens
// in flight before it admits a higher token, but only its own; a request
// that another replica admitted with a lower token may still be running
// when this one admits a higher one. A resource whose effects must be
// ordered across replicas checks the token where the effect is made: in
// its database's transaction (markstore.SQL.CheckTx), or with a
// conditional write of its own. [Guard.Mark] is this guard's view of the
// mark, possibly behind the store's.
//
// [WithExclusiveStore] asserts that the guard is the only user of its
// store: tokens equal to the mark then cost no store access at all. If
// another guard does use the store, this one silently admits tokens below
// the mark the other one raised.
//
// # Many locks: scopes and the Keyed guard
//
// A token is strictly increasing among the grants of one name; whether two
// names' tokens compare at all depends on the backend (etcd's revisions
// do, Redis's per-name counters do not). So one mark for a resource that
// follows many locks (one per order, say) would reject a legitimate holder
// of one lock whose grant is older than another lock's latest token, or,
// on Redis, admit a zombie of one lock whose counter runs ahead of
// another's. A [Keyed] guard keeps a mark per scope (the lock's
// name, which clients send beside the token: fencing.ScopeHTTPHeader), takes
// from the resource which scope each request needs, and rejects a token of
// another scope with its own status (403, PermissionDenied). On a store, it
// keeps only the scopes in use (and a bounded number of idle ones) in
// memory.
//
// # Verified tokens
//
// A mark only rises, so one request with a token far above any real grant
// (a client bug, a corrupted header, a hostile caller) would raise it for
// good and fence out every legitimate holder: one bad request would brick
// the resource, and with a store even a restart would not heal it. A guard
// built [WithVerifier] asks the coordination service (each backend's
// NewVerifier) whether a token above the mark is that of a current grant
// before it raises the mark, and refuses it if not (an error wrapping
// fencing.ErrTokenForged) or if the service cannot tell (ErrUnverified).
// Tokens at or below the mark are never verified, so steady traffic costs
// nothing more; a new holder's first request costs one read of the
// coordination service. It also refuses the token of a grant that is over
// (a zombie) even where the guard has no mark yet (a fresh guard without a
// store).
//
// # Bad input
//
// A nil context.Context is bad input: [Guard.Load], [Guard.CheckContext],
// [Guard.Admit], [Keyed.CheckContext], [Keyed.Admit] and
// [Keyed.MarkContext] given one return an error that says "nil context"
// and wraps primitives.ErrInvalidArgument, at once, with or without a
// store or a verifier: nothing is admitted, no mark moves (in memory or in
// the store), neither the store nor the verifier is called, a Keyed keeps
// no scope for it, and metrics do not count it (it is no request). The
// middleware and interceptors always have a context.
//
// # What a Guard does not do
//
// Tokens are plain numbers. Without a verifier, a Guard cannot tell a
// forged higher token from a real one. With one, it still admits the token
// of the current holder from anyone who presents it: authenticate callers
// at the transport (mTLS, a signed header). A Guard also orders requests
// only by token: it does not know who holds a grant now, only that a
// higher token has been seen (or, with a verifier, that a token above the
// mark is a current grant's).
package guard

import (
	"context"
	"fmt"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
)

// Guard is a fencing-token validator for one resource. Its zero value is
// ready to use with mark 0 and no store; New applies options. A Guard is
// safe for concurrent use and must not be copied after first use.
type Guard struct {
	s   state
	cfg config
}

// New returns a Guard with the given options applied.
func New(opts ...Option) *Guard {
	g := &Guard{}
	g.cfg.apply(opts)
	if g.cfg.initial > 0 {
		g.s.mark.Store(int64(g.cfg.initial))
	}
	return g
}

// Mark returns the high-water mark: the highest token this Guard has
// accepted (in Check or Admit, including an Admit that raised the mark and
// then gave up waiting for lower tokens to finish) or read from its store,
// or the initial mark if it is higher. A token it refused (stale, forged
// or unverified with WithVerifier, or one whose raise in the store failed)
// leaves it where it was. It never decreases. A Guard on a store reads the
// stored mark at its first Check or Admit (or at Load); until then Mark
// does not include it. On a store shared with other guards it is this
// guard's view, possibly behind the store's: the store, not Mark, decides
// the next request.
func (g *Guard) Mark() fencing.Token {
	return fencing.Token(g.s.mark.Load())
}

// Load reads the stored mark now (see WithStore), so that Mark reports it
// and the first request does not wait for the read. Without a store, or
// once loaded, it does nothing. It waits at most until ctx ends or the store
// timeout passes. Errors wrap ErrStore; a nil ctx, even without a store, is
// an error wrapping primitives.ErrInvalidArgument (see "Bad input").
func (g *Guard) Load(ctx context.Context) error {
	if ctx == nil {
		return nilContext("Guard.Load")
	}
	if g.cfg.store == nil || g.s.loaded.Load() {
		return nil
	}
	return g.cfg.load(ctx, &g.s, "")
}

// Check accepts t if it is at least the mark, raising the mark to t, and
// otherwise returns an error wrapping fencing.ErrTokenStale that names t and
// the mark (for example "guard: token 5 is below the mark 7"). A token <= 0
// gives an error wrapping fencing.ErrNoToken.
//
// Check is lock-free: a CAS loop on the mark. A token equal to the mark
// costs one atomic load and no write. When Check raises the mark above the
// token of requests admitted by Admit and still in flight, it cancels their
// contexts (cause wrapping fencing.ErrTokenStale) but does not wait for them
// to finish: Check is a bare check, and a request accepted by Check may still
// run alongside requests admitted earlier with a lower token. Use Admit for
// a critical section.
//
// On a store (WithStore), a token above the mark is first raised in the
// store, durably, and accepted only if that succeeds and the store holds
// no higher mark (an error wrapping ErrStore if the store fails); a token
// equal to the mark costs one read of the store (none with
// WithExclusiveStore). With a verifier (WithVerifier), a token above the
// mark is verified first.
// Check waits for the store (its first read of the stored mark, a raise, or
// another request's read) at most the store timeout (DefaultStoreTimeout,
// or WithStoreTimeout): a store that does not answer by then is an error
// wrapping ErrStore and context.DeadlineExceeded. CheckContext bounds the
// wait by a context as well.
func (g *Guard) Check(t fencing.Token) error {
	if g.plain(t) {
		return g.s.check(t) // the plain guard's fast path, nothing around it
	}
	return g.cfg.check(context.Background(), &g.s, "", t)
}

// plain reports whether t needs nothing but the state: no store, no
// metrics, and no verifier or t at or below the mark (the mark only rises,
// so the state will not raise it to t).
func (g *Guard) plain(t fencing.Token) bool {
	return g.cfg.store == nil && g.cfg.metrics == nil && (g.cfg.verifier == nil || int64(t) <= g.s.mark.Load())
}

// CheckContext is Check with its waits on the store bounded by ctx as well
// as by the store timeout: if ctx ends first, it returns an error wrapping
// ErrStore and ctx.Err(), and t is not accepted. Without a store it is
// Check. A nil ctx is an error wrapping primitives.ErrInvalidArgument, and
// t is not looked at (see "Bad input").
func (g *Guard) CheckContext(ctx context.Context, t fencing.Token) error {
	if ctx == nil {
		return nilContext("Guard.CheckContext")
	}
	if g.plain(t) {
		return g.s.check(t)
	}
	return g.cfg.check(ctx, &g.s, "", t)
}

// Admit is Check plus a critical section. If t is below the mark it fails at
// once with an error wrapping fencing.ErrTokenStale (and if t <= 0, wrapping
// fencing.ErrNoToken). Otherwise it raises the mark to t and, once no request
// with a lower token is in flight, admits the request: it returns a context
// derived from ctx and a done function that the caller must call when the
// request has finished acting on the resource.
//
// The returned context is cancelled as soon as a higher token is seen (by
// Admit or Check); its cause (context.Cause) then wraps
// fencing.ErrTokenStale. A higher token asking to be admitted waits until
// every in-flight request with a lower token has called done. Requests with
// equal tokens run concurrently and never wait for each other.
//
// The wait is bounded by ctx: if ctx ends first, Admit returns an error
// wrapping ctx.Err() and the request is not admitted. The mark stays raised
// to t even then, and the lower-token requests stay cancelled: t has been
// seen, and a token that has been seen must fence out older ones whether or
// not its own request went through. If a still higher token is seen while
// Admit waits, the waiting request has become stale and Admit returns an
// error wrapping fencing.ErrTokenStale.
//
// done is idempotent and also cancels the returned context, releasing its
// resources. On error the returned context is nil and done is a no-op (safe
// to call).
//
// On a store (WithStore), a token above the mark is raised in the store,
// durably, before it is admitted or raises the mark in memory; if that fails
// Admit returns an error wrapping ErrStore and the mark stays where it was.
// Tokens equal to the mark cost one read of the store (none with
// WithExclusiveStore). With a verifier, a token above the mark is verified
// first. Every wait on the store
// (the first read of the stored mark, a raise, or another request's read)
// ends when ctx does or the store timeout passes (see WithStoreTimeout),
// whichever is first; Admit then returns an error wrapping ErrStore and the
// context's error.
//
// A nil ctx is an error wrapping primitives.ErrInvalidArgument: t is not
// looked at, nothing is admitted (see "Bad input").
func (g *Guard) Admit(ctx context.Context, t fencing.Token) (context.Context, func(), error) {
	if ctx == nil {
		return nil, noop, nilContext("Guard.Admit")
	}
	return g.cfg.admit(ctx, &g.s, "", t)
}

// nilContext is the error of method given a nil context (see "Bad
// input" in the package documentation).
func nilContext(method string) error {
	return fmt.Errorf("guard: %s: nil context: %w", method, primitives.ErrInvalidArgument)
}
