// Package fencetest proves that a resource fences: that it refuses the
// writes a zombie (an owner paused, partitioned or restarted past the end of
// its grant) would make with its old fencing token, and still takes every
// write of the current owner. It is for the resource side what
// testing/fstest is for a file system: a user calls it from a test of their
// own, on their own handler, database row or check.
//
// A fencing token protects nothing unless the resource checks it, on every
// route, across restarts and replicas. disco's guard (package
// [github.com/ahrtr/disco/fencing/guard]) does that check; a resource that
// checks by itself (a SQL column updated with "WHERE token <= ?", a
// conditional write in another store, a handler that reads the header) can
// use this package to show that its check holds.
//
// # Usage
//
// Describe how to send one write (with a token and, on a keyed resource, its
// scope) and how to read back what the resource holds, and call [Run]:
//
//	func TestOrdersFence(t *testing.T) {
//		db := openTestDB(t)
//		fencetest.Run(t, fencetest.HTTPHandler(
//			func() http.Handler { return orders.NewServer(db) }, // a restart builds it again on db
//			fencetest.HTTPAPI{
//				Write: func(scope, value string) *http.Request {
//					return httptest.NewRequest("PUT", "/orders/42", strings.NewReader(value))
//				},
//				Read: func(scope string) *http.Request {
//					return httptest.NewRequest("GET", "/orders/42", nil)
//				},
//			}))
//	}
//
// A resource that keeps one mark per lock (guard.Keyed) sets
// [Resource].Keyed, and ScopePrefix so that the kit's scopes are names it
// serves (the package's Example does). One that keeps nothing across a
// restart sets Restart to nil; one that runs as several replicas sets
// Replica; one whose guard verifies tokens sets Verifies and Grant.
//
// Adapters build a [Resource] for the common shapes: [HTTPHandler] (served
// in-process), [HTTPServer] (a base URL), [GRPCServer] (a *grpc.Server,
// served in-process), [GRPCConn] (a server elsewhere) and [Check] (a
// func(ctx, token, scope) error that guards writes the kit keeps itself). A
// Resource can also be written by hand: it is two functions (Write and Read)
// and a few declarations.
//
// # Histories
//
// Run replays, one named subtest each, the histories that break unfenced
// resources. A failure message starts with the history's name and says what
// a zombie would have done:
//
//   - NoToken: a write with a missing, malformed, zero or negative token
//     (including forms a lenient parser reads as a token above the mark:
//     "007", "+7", "0x7", "7.0") is refused, changes nothing, and raises
//     no mark; on a fresh resource too, where "WHERE token <= 0" lets a
//     token 0 in.
//   - StaleWrite: a paused owner's late write, after a newer token was
//     accepted, is refused with an error wrapping [fencing.ErrTokenStale]
//     (so the zombie learns that its grant is over) and the resource still
//     shows the newer owner's value; the newer owner keeps writing.
//   - EqualTokens: concurrent writes with one token (readers of an rwlock
//     share one) are all accepted.
//   - OtherScope and IndependentScopes (a keyed resource only): a token of
//     another scope, or one without a scope, is refused; a scope's newer
//     tokens never lock out another scope's holder.
//   - StaleWriteAfterRestart (when Resource.Restart is set): StaleWrite
//     across a restart of the resource. A mark kept only in memory fails
//     here.
//   - Replicas (when Resource.Replica is set): a token below either
//     replica's last accepted token is refused by both.
//   - ManyOwners: many owners with interleaved writes and reads, zombies
//     among them, checked against a linearizable model of a fenced register
//     (porcupine): no write is applied below a token already accepted, and
//     no read sees a refused write.
//   - ForgedToken: a token far above any grant. A resource that verifies
//     tokens (Resource.Verifies: its guard asks the coordination service
//     through a guard.Verifier) must refuse it and keep its mark. One that
//     does not is shown to be bricked by it, and the subtest is skipped with
//     a message that says so ("go test -v" lists it): one bad request locks
//     every legitimate owner out.
//
// Histories run one after another on the one resource, with tokens that
// only grow (from 1, unless Resource.Grant issues them), so the resource
// must be fresh: it has seen no token yet. On a keyed resource every history
// uses scopes of its own.
package fencetest
