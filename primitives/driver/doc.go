// Package driver is the owner engine every disco backend is built on, for
// authors of backends, as database/sql/driver is for database drivers.
// Users of disco never need it.
//
// What a user sees of a lock, a read/write lock or an election is the same
// on every backend, and it is written here once:
//
//   - Hold is the record of one grant (a lock's hold, a read or write
//     grant, a term as leader) and builds every event about it: Acquired,
//     Released, Lost, Suspended, Resumed.
//   - Clock is a session's liveness: from the send times of acknowledged
//     renewals it says when the session's lease surely ends (its deadline),
//     when its holders are to be Suspended, when Resumed, and when Lost.
//     It is a plain value with no goroutines and no timers.
//   - Shell is what every primitive's service is, whatever its store: one
//     hold at a time, Subscribe, Done, Err, CancelOnSuspend, the grant's
//     recording and its end, and Release matching by Created.
//   - Config is the option set every backend offers, with one meaning and
//     one default: WithTTL, WithSuspendAfter, WithCancelOnSuspend,
//     WithMetrics, WithLogger, WithContext (WithSession is each backend's).
//   - QuoteName, IsNil, Inflight, Backoff, Sleep and WithDone are what the
//     backends share beyond the engine: how a name shows in an error, how
//     a constructor tells a typed nil client, how Close waits for requests
//     left under way, how retries are paced. A backend outside this module
//     (k8sio is one) needs nothing but this package.
//
// A driver speaks only its store: how to enqueue a key, wait for its turn,
// derive a token, delete the key, renew the lease. Its session runs one
// event loop goroutine (see package actor) that owns the store's session
// and every Shell and Clock on it; the methods marked "Loop only" are called
// from that goroutine and no other. The rest are safe from any goroutine.
//
// The rules a driver keeps:
//
//   - A grant is recorded (Shell.Grant) before its caller is answered, and
//     undone if the caller gave up meanwhile; so Term sees a grant as soon
//     as Campaign returns, and a grant nobody took is never announced.
//   - A caller enters the shell (Enter) before it writes a key and leaves
//     (Leave) if it gets no grant; once a grant is recorded only its end
//     (Shell.End and the functions on it) leaves.
//   - The clock is told of every acknowledged renewal with the time its
//     request was sent, never the time its reply came: the store renewed the
//     lease no earlier than that send, so counting from it never
//     overestimates the lease.
//   - Every Suspend and Resume the clock reports goes to every shell on the
//     session, and a shell that joins a suspended session is told Suspend
//     at once; a shell that holds nothing remembers it, so that a grant
//     made while suspended is followed by Suspended at once.
package driver
