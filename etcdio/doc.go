// Package etcdio is disco's etcd backend: a Session that owns one lease and
// one event loop, and the lock, read/write lock and election that run on it.
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd1:2379"}})
//	l, err := etcdio.NewLock(cli, "/locks/orders")
//	defer l.Close()
//	err = lock.Do(ctx, l, func(ctx context.Context, g lock.Grant) error {
//		return write(ctx, g.Token()) // every request carries the token
//	})
//
// The other primitives have the same shape: NewRWLock, NewElection,
// NewSemaphore(cli, prefix, n), NewBarrier, NewDoubleBarrier(cli, prefix,
// count); several of them share one lease and loop with WithSession.
// NewMarkStore keeps a guard's marks in etcd, NewVerifier checks a token
// for a guard. They interoperate with etcd's own recipes on the same
// prefix (concurrency.Mutex, concurrency.Election, recipes.RWMutex).
//
// # The session loop
//
// Each Session runs one event-loop goroutine. The loop alone owns the
// session's state: the lease deadline, a mirror of every key prefix its
// primitives use, and each primitive's grant, waiter and observers. Its
// rules:
//
//   - Nothing blocks the loop. Every etcd request runs elsewhere: a caller's
//     own request (Lock's transaction, Unlock's delete) runs on the caller's
//     goroutine, and the session's own work (keepalive, watches, a waiter's
//     confirming read, an rwlock's token, deleting abandoned keys) runs on
//     the session's helper goroutines. They post their results to the loop's
//     mailbox, which never blocks. The loop answers callers through replies
//     that never block either, so a caller that gave up (its context ended)
//     costs the loop nothing; the caller withdraws and deletes its key.
//   - Who may block: callers (on their reply, until their context ends) and
//     helpers (on etcd, each attempt of a request bounded: 2 s at first,
//     doubling up to 8 s while the store answers slower than that, so that a
//     member that stopped answering is left for another while a slow store
//     is still waited for). Never the loop.
//   - A waiting Lock or Campaign is its caller's goroutine, parked on its
//     reply; the loop keeps a record. A waiting lock or candidate also has
//     one helper goroutine watching the key ahead (plus the goroutine etcd's
//     client library runs per open watch). The session has one keepalive helper and
//     one watch per mirrored prefix, whatever the number of primitives.
//   - A slow subscriber never stalls the loop. Events are queued per
//     subscriber (package actor): Acquired, Released, Lost, Suspended and
//     Resumed are never dropped or coalesced; LeaderChanged, and an
//     election's Observe states, may be coalesced for a slow reader, the
//     latest always delivered.
//   - Every call parked on a service (a waiting Lock or Campaign, an Observe
//     waiting for the mirror) is answered when the service ends.
//
// # Loss, suspension and resumption
//
// The keepalive renews the lease every TTL/3 (every two thirds of the
// suspension point if that is sooner, see WithSuspendAfter) and tells the
// loop when each acknowledged request was sent. The server extended the
// lease no earlier than that, so the loop counts its deadline from the send
// time, never from the reply's arrival. When no keepalive has been
// acknowledged for a part of the TTL (WithSuspendAfter, default one half),
// every holder gets Suspended with that deadline: no one else can acquire
// before it. An acknowledgement in time brings Resumed. The session is lost
// when the deadline passes, or at once when etcd answers that the lease is
// gone. Then every primitive on it gets Lost for what it held, its waiters
// fail, Done closes, and every later call fails with an error wrapping
// primitives.ErrLost. Close instead revokes the lease, so others proceed at
// once rather than after the TTL.
//
// If a held key disappears, the session asks etcd whether its lease is
// still there: if not, the session is lost (the cause names the lease);
// if so, only that hold ends with Lost and the primitive stays usable. A
// question etcd does not answer is asked again: until etcd says, the hold
// stands (at most until the session's deadline).
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
// Keys go under prefix+"/", as etcd's recipes put them (a prefix "/a/" gives
// keys "/a//..."). Key names are the service's own (its session's lease and
// a number), so services sharing a session and a prefix are still distinct
// owners. A service alternates between two names: each acquisition's key
// differs from the previous one's, yet etcd's index of the prefix does not
// grow with every acquisition until the next compaction. A key is only ever
// created where no key of its name exists: one left behind earlier is
// deleted first, never overwritten. A key whose write had an unknown outcome
// (the request failed) is deleted, and its name is never used again; a
// caller that gives up while its key's write is in flight leaves the write
// to a session helper, which deletes the key if etcd applied it.
//
// Names are independent. A queue member is a key with a lease directly in
// one of the primitive's queues: directly under prefix+"/" for a lock or an
// election, under prefix+"/read/" or prefix+"/write/" for an rwlock. Keys of
// a nested name (the lock "/n/sub" puts its keys within "/n"'s range),
// keys without a lease (an rwlock's epoch key "/n/rw.epoch", a barrier's
// key) and any other key under the prefix are never taken for members, so
// a lock on "/n" is free while "/n/sub" is held. (etcd's own Mutex and
// Election do count them.) Two layouts cannot be told apart where a nested
// name ends in a segment another layout reserves: an rwlock on "/n" owns
// "/n/read" and "/n/write", so a lock named "/n/read" beside it would share
// its readers' queue; do not name primitives so. A lock reads its queue
// keys only, which etcd serves from its index without the keys' values or
// leases: a key named as disco names its owners' ("<lease in hex>-...")
// counts as a member by its name alone, with or without a lease, so do not
// write such keys under a lock's prefix by hand; any other name is checked
// with a read that shows leases.
//
// A lock waiter waits for the key just ahead of it, as etcd's Mutex does,
// but watches the deletions of that key's session's keys (its lease's key
// prefix), from the current revision, after which it looks once: a watch
// from now is in sync at once, whereas the Mutex's watch from a past
// revision is served by etcd's catch-up path, which runs every 100 ms. When
// the key ahead is deleted, one transaction confirms that the waiter's own
// key still exists and nothing is left ahead; its revision is the token.
// The read is serializable, served by a member from its own state without a
// consensus round: whatever a member shows is a committed revision's state,
// which is all a token needs; an answer from before the delete just seen is
// refused and the read asked again linearizably. The watch outlives the
// wait: owners that lock in a loop queue again in the same order, so a
// waiter's next key most often waits behind the next key of the same
// session, and the open watch serves it with no request; it closes when it
// brings news while its service waits for nothing. So in a queue that turns
// steadily a handoff costs three requests (the releaser's delete, its next
// enqueue, the next holder's read) and sends one watch event, to the next
// holder, however many wait: load per handoff stays flat. A wait behind a
// session not followed yet costs three more (opening a watch, its first
// read, closing the previous one). (The alternative, every session watching
// the whole prefix, needs no read but sends every event to every contender:
// at 128 contenders an order of magnitude less throughput.)
//
// Every watch a session keeps checks its own liveness (a sessionless
// barrier's Wait, which no session keeps, relies on the client's gRPC
// keepalives and its caller's ctx): after a quiet spell (a quarter of the
// TTL, between 250 ms and 2 s) it asks etcd for a progress notification, and
// if none comes it moves to a new gRPC stream, which the client may open on
// another member; a member cut off from this client would otherwise hold
// the watch forever while the keepalive moved on. Opening a watch and asking
// for progress are bounded by the same spell, since the client waits on a
// stuck connection for as long as it stays stuck. A keepalive whose
// acknowledgement is late likewise moves to a new stream (see keepalive.go).
//
// The client's balancer, not disco, picks the member of each new stream, and
// it keeps a connection whose peer went silent (its TCP connection is up) in
// the rotation; it may pick that member again. Configure the etcd client
// with gRPC keepalives (clientv3.Config DialKeepAliveTime, at least etcd's
// --grpc-keepalive-min-time, 5 s by default, and DialKeepAliveTimeout) so
// that it drops such a connection itself: disco's checks then bound the
// wait until it does, and the keepalives bound it after.
//
// To notice a held or waiting key deleted by someone else, or its lease
// revoked, a service watches the deletions of its session's own keys (its
// lease's key prefix, so no other owner's events reach it), shared by the
// session's services on the same queue, but only for a hold older than 100
// ms or a wait older than a quarter of the TTL: a short hold or wait sends
// its own session no event at its release. So a held key deleted by someone
// else ends its hold with Lost once the hold is 100 ms old (at once after
// that), plus a round trip; a waiting key's deletion fails its Lock with
// ErrLost at its turn or once the wait is a quarter of the TTL old (at once
// after that), plus a round trip; a lease revoked under a session ends it
// then, or at its next keepalive (every third of the TTL), whichever comes
// first. An election's candidates do the same.
//
// A waiting candidate follows the deletions of the one key just ahead of its
// own, so a failover (a term's end, and the next candidate's Campaign
// returning) wakes the candidate next in line alone however many wait:
// with 1,000 candidates it costs etcd as many requests as with 8. Who
// leads, for LeaderChanged and Observe, comes from a watch of the whole
// prefix (one per session, values included, since who leads is the first
// of everyone's keys), which a candidate keeps only while someone
// subscribes to its events or observes it: every change under the prefix
// reaches each such session. A subscriber that arrives after a change gets
// LeaderChanged for the leader at its subscription only if that leader is
// not the last one the candidate reported.
//
// A key this session wrote and no longer wants (a caller gave up, Close on a
// shared session) is deleted by a helper, retried with backoff while the
// session lives: one failed delete never leaves a key under a live lease.
//
// # Fencing tokens
//
// A lock's token is a revision at which its key exists and no key created
// before it does; every Lock writes a new key, so no two grants share one. A
// leader's token is its key's CreateRevision. A read/write lock issues tokens
// from an epoch key beside its prefix (see NewRWLock), so that readers holding
// together share one token and a single guard protects reads and writes.
// Every grant also carries Created, its key's CreateRevision, which names it:
// Release, ResignTerm, lock.Do and election.Lead match grants by it; and
// LeaseID, the session's etcd lease.
//
// # Options
//
// The options every disco backend shares, with the same meaning and default
// (see package primitives/driver): WithTTL (the lease's TTL, whole seconds;
// default DefaultTTL, 10 s), WithSuspendAfter (part of the TTL without an
// acknowledged keepalive before Suspended; default 1/2),
// WithCancelOnSuspend, WithMetrics, WithLogger, WithContext (bounds
// construction only, default 10 s), WithSession. etcd's own:
// WithMaxValueSize.
//
// # Map
//
// etcdio is a driver of package primitives/driver, the owner engine every
// disco backend shares: a service embeds a driver.Shell (the grant, its
// events, Subscribe, Done, Err, one hold at a time), and the session keeps
// a driver.Clock (the lease's deadline, Suspended, Resumed, Lost). What is
// here is etcd's alone: how a key is queued, waits, gets its token, is
// deleted, and how the lease is kept alive.
//
// One type, service (service.go), is every primitive; a spec value says what
// sets a lock, an rwlock and an election apart (its errors, its queues, its
// token rule, what it mirrors). lock.go, rwlock.go and election.go hold the
// three specs and the public methods, each a few lines over the service.
//
//   - session.go: the Session and its loop, run. run's doc lists every loop
//     entry point: each is a method marked "Loop only", posted by a caller
//     or a helper. keepalive.go: the keepalive helper, and what the
//     loop does with each acknowledgement and with the clock's moments. watch.go: follow, the one way a helper watches
//     etcd (with its liveness check). mirror.go: the session's copy of a
//     prefix. cleanup.go: keys to delete while the session lives.
//   - queue.go: how a lock waits. A caller writes its key (create) and parks
//     its reply on the loop (park, enqueued). The loop follows the
//     deletions of the session of the key just ahead (watchAhead, the
//     service's ahead mirror) and has a helper confirm, off the loop, that
//     the waiter's key exists and nobody is ahead (checkAhead, look,
//     aheadLooked). Then the
//     grant is born whole in holds: with the read's revision as its token,
//     or with the token the spec issues first (rwlocks: tokenIssued).
//   - election.go: a candidate waits as a lock's owner does, behind the
//     key just ahead alone (aheadPrefix); its token is its key's
//     CreateRevision. While anyone listens (listenersChanged), the service
//     follows the session's mirror of the prefix, and reports who leads
//     from it (electionChanged).
//   - grant.go: how a grant (the shell's driver.Hold) ends in etcd:
//     released (Unlock, Resign), Lost (checkGrant, then vanishedConfirmed
//     or the session's end; a release of a grant seen vanished asks about
//     the lease itself, settleVanished), Close; and when a service watches
//     its own keys (watchOwnSoon).
//   - semaphore.go: a semaphore is a service whose spec's token claims a
//     slot; its waiter parks like a lock's (semEnqueued), in a chain where
//     each waiter watches the key just ahead (watchPred) and the head alone
//     counts down the keys ahead from a watch of the queue (watchQueue;
//     semLooked on its turn).
//   - barrier.go, barrier_double.go: the barriers, on etcd's recipe
//     layouts. Their requests run on their callers' goroutines. A double
//     barrier's waits (Enter's for ready, Leave's for a key to go) are
//     watches its session's helpers keep with follow, started from the loop
//     (watchFor); the caller waits for the outcome (await). A barrier has no
//     session: its Wait's watch runs on the caller's goroutine, the one
//     watch no session keeps, so without follow's liveness check; it relies
//     on the client's gRPC keepalives (see below) or the caller's context.
//   - metrics.go: WithMetrics and NewMetrics, over package metrics' one
//     type that every backend reports to. markstore.go: a guard's mark store in etcd, for
//     fencing/guard (no session: one compare-and-swap per raise).
package etcdio
