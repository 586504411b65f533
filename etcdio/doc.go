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
// # Queues, tokens and the prefix watch
//
// Every acquisition writes a fresh key (named by lease and a per-session
// counter, so services sharing a session and a prefix are still distinct
// owners) and waits for the keys written before it, in the orders etcd's
// concurrency.Mutex, concurrency.Election and recipes.RWMutex use, so each
// primitive interoperates with its etcd counterpart on the same prefix. The
// key and the check for anyone ahead are one transaction: an uncontended
// Lock is a single round trip, Unlock a second.
//
// Waiters learn their turn from the session's mirror of the prefix: one
// long-lived watch, in sync from the start, that the session keeps for its
// whole life. A handoff therefore needs no request at all from the next
// holder: the previous holder's delete reaches it as a watch event, and its
// token is that event's revision, at which its key exists and no earlier one
// does. etcd's Mutex instead opens a fresh watch at a past revision for each
// wait, which etcd serves on its slower unsynced path.
//
// The trade-off chosen: requests per handoff stay flat as contenders grow
// (the release and the next acquisition's own write), but each session
// watching a prefix receives every event under it, so watch events per
// handoff grow with the number of sessions contending on one prefix. For the
// tens of contenders a lock usually has this is cheaper than etcd's per-waiter
// watches; see bench/ for the figures.
//
// # Fencing tokens
//
// A lock's token is a revision at which its key exists and no key created
// before it does; every Lock writes a new key, so no two holds share one. A
// leader's token is its key's CreateRevision. A read/write lock issues tokens
// from an epoch key beside its prefix (see NewRWLock), so that readers holding
// together share one token and a single guard protects reads and writes.
package etcdio
