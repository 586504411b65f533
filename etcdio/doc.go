// Package etcdio is disco's etcd backend: a Session that owns one lease and
// one event loop, and the lock, read/write lock and election that run on it.
//
// # The session loop
//
// Each Session runs one event-loop goroutine. The loop alone owns the
// session's state: the lease deadline, a mirror of every key prefix its
// primitives use, and each primitive's holds, waiters and observers. Its
// rules:
//
//   - Nothing blocks the loop. Every etcd request runs elsewhere: a caller's
//     own request (Lock's transaction, Unlock's delete) runs on the caller's
//     goroutine, and the session's own work (keepalive, watches) runs on one
//     helper goroutine each. They post their results to the loop's mailbox,
//     which never blocks. The loop answers callers through replies that never
//     block either, so a caller that gave up (its context ended) costs the
//     loop nothing; the loop sees the answer refused and the caller removes
//     its key.
//   - Goroutines do not grow with waiters. A waiting Lock is the caller's own
//     goroutine, parked on its reply; the loop keeps a record, not a
//     goroutine. The session has one keepalive goroutine and one watch per
//     prefix, whatever the number of primitives and waiters.
//   - A slow subscriber never stalls the loop. Events are queued per
//     subscriber (package actor): Acquired, Released and Lost are never
//     dropped or coalesced; LeaderChanged, and an election's Observe states,
//     may be coalesced for a slow reader, the latest always delivered.
//
// # Loss
//
// The keepalive renews the lease every TTL/3 and tells the loop when each
// acknowledged request was sent. The server extended the lease no earlier
// than that, so the loop counts its deadline from the send time, never from
// the reply's arrival. The session is lost when the deadline passes without
// a newer acknowledgement, or at once when etcd answers that the lease is
// gone, whichever comes first. Then every primitive on it gets Lost for what
// it held, its waiters fail, Done closes, and every later call fails with an
// error wrapping primitives.ErrLost. Close instead revokes the lease, so
// others proceed at once rather than after the TTL.
//
// If only a held key disappears (deleted by someone else) while the session
// lives, that hold ends with Lost and the primitive stays usable.
//
// # Queues, tokens and watches
//
// Every acquisition creates a new key and waits for the keys created before
// it, in the orders etcd's concurrency.Mutex, concurrency.Election and
// recipes.RWMutex use, so each primitive interoperates with its etcd
// counterpart on the same prefix. The key and the check for anyone ahead are
// one transaction: an uncontended Lock is a single round trip, Unlock a
// second.
//
// Key names are the service's own (its session's lease and a number), so
// services sharing a session and a prefix are still distinct owners. A
// service alternates between two names: each acquisition's key differs from
// the previous one's, yet etcd's index of the prefix does not grow with every
// acquisition until the next compaction, which would slow every range over
// the prefix (etcd's Mutex likewise reuses one key per session).
//
// A lock waiter watches only the key just ahead of it, as etcd's Mutex
// does, but from the current revision, after which it looks once more: a
// watch from now is in sync at once, whereas the Mutex's watch from a past
// revision is served by etcd's catch-up path, which runs every 100 ms. When
// the key ahead is deleted, one transaction confirms that the waiter's own
// key still exists and nothing is left ahead; its revision is the token. The
// waiting runs on the caller's goroutine; the loop only keeps a record. (etcd's
// client library serves each open watch with a goroutine of its own, so a
// waiter costs that one too while it waits.)
//
// The trade-off chosen: load per handoff stays flat as contenders grow. A
// handoff sends one watch event to one waiter, and an acquisition costs
// about six requests (etcd's Mutex: seven), however many wait. The price is
// one round trip after the deletion event before the next holder knows it
// holds. The alternative, every session watching the whole prefix, needs no
// such round trip but sends every event to every contender, which at 128
// contenders cost an order of magnitude in throughput (see bench/).
//
// To notice a held key deleted by someone else, each session also keeps one
// long-lived watch per queue on its own keys only (its lease's key prefix),
// so no other owner's events reach it. An election instead mirrors its whole
// prefix, since who leads is the first of everyone's keys; candidates are
// few.
//
// # Fencing tokens
//
// A lock's token is a revision at which its key exists and no key created
// before it does; every Lock writes a new key, so no two holds share one. A
// leader's token is its key's CreateRevision. A read/write lock issues tokens
// from an epoch key beside its prefix (see NewRWLock), so that readers holding
// together share one token and a single guard protects reads and writes.
package etcdio
