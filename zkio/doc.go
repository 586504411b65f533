// Package zkio is disco's ZooKeeper backend: a Session that owns one
// ZooKeeper session and one event loop, and the lock, read/write lock,
// election, semaphore, barrier and double barrier that run on it, in the
// znode layouts of Apache Curator's recipes.
//
//	lk, err := zkio.NewLock([]string{"zk1:2181", "zk2:2181"}, "/locks/orders")
//	rw, err := zkio.NewRWLock(servers, "/locks/catalog")
//	el, err := zkio.NewElection(servers, "/elections/scheduler")
//	sm, err := zkio.NewSemaphore(servers, "/semaphores/exports", 3)
//	b, err := zkio.NewBarrier(servers, "/barriers/nightly")
//	db, err := zkio.NewDoubleBarrier(servers, "/barriers/stage", 4)
//
// A primitive made with servers has a session of its own, which its Close
// ends. WithSession runs several primitives on one session (then pass nil
// servers); their Close keeps the session, which the caller closes.
//
// # The session loop
//
// Each Session runs one event-loop goroutine (package actor), built on the
// owner engine every backend shares (package primitives/driver): each
// primitive is a driver.Shell, its grant a driver.Hold, the session's
// liveness a driver.Clock. The loop alone owns the session's state: its
// clock, and each primitive's grant, its election view and its observers.
// Its rules:
//
//   - Nothing blocks the loop. Every ZooKeeper request runs elsewhere: a
//     caller's own requests (create its znode, list the queue, delete on
//     Unlock) run for the caller, who waits for each answer until its
//     context ends (the client's requests take no context: one it gave up
//     on runs on, on a session helper, which deletes a znode it made), and
//     the session's own work (watching a held znode, following who leads,
//     deleting znodes a caller gave up) runs on the session's helper
//     goroutines. They post their results to the loop's mailbox, which
//     never blocks; the loop answers through replies that never block
//     either. A caller that gave up (its context ended) costs the loop
//     nothing: it withdraws its own znode (it waits for the delete's
//     answer, half a second at most: with ZooKeeper answering, its znode is
//     gone when it returns; Close of the primitive waits for what goes on
//     after that, see below), and a grant answered after it gave up is
//     never recorded.
//   - The loop owns the session-state events of the ZooKeeper client, and
//     every hold's watch reports to it. A slow subscriber never stalls it:
//     events are queued per subscriber; Acquired, Released, Lost, Suspended
//     and Resumed are never dropped or coalesced; LeaderChanged and
//     Observe's states may be coalesced for a slow reader, the latest
//     always delivered.
//   - Who may block: callers (on ZooKeeper, or on their reply, until their
//     context ends) and helpers (on ZooKeeper, until the session ends).
//
// # Options
//
// NewSession, NewLock, NewRWLock, NewElection, NewSemaphore, NewBarrier and
// NewDoubleBarrier take (NewSession, NewBarrier and NewDoubleBarrier refuse
// WithCancelOnSuspend):
//
//	WithTTL(d)             the session timeout to ask for; default DefaultSessionTimeout
//	                       (driver.DefaultTTL, 10s); whole milliseconds, at least 1s
//	WithSessionTimeout(d)  the same, by its ZooKeeper name (at least 100ms)
//	WithSuspendAfter(p)    Suspended after p of the granted timeout unheard from;
//	                       default driver.DefaultSuspendAfter (0.5)
//	WithCancelOnSuspend()  lock.Do, rwlock.DoRead/DoWrite, election.Lead end fn's
//	                       context at Suspended; default off (primitives only)
//	WithMetrics(m)         report to m (package metrics); default none
//	WithLogger(l)          the session's and the ZooKeeper client's logs; default none
//	WithContext(ctx)       bounds construction; default 10s
//	WithMaxDataSize(n)     the largest value taken; default DefaultMaxDataSize
//	WithSession(s)         run on s instead of a session of one's own
//
// WithSession excludes the options that configure a session (WithTTL,
// WithSessionTimeout, WithSuspendAfter, WithMaxDataSize); a primitive on
// it without WithMetrics reports to the session's metrics.
//
// # Layouts and interoperability
//
// A lock's znodes are <path>/_c_<uuid>-lock-<seq>, as Curator's
// InterProcessMutex creates them (with protection); an election's are
// <path>/_c_<uuid>-latch-<seq>, as LeaderLatch creates them, with the
// candidate's value as data (LeaderLatch's participant id); a read/write
// lock's are <path>/_c_<uuid>-__READ__<seq> and <path>/_c_<uuid>-__WRIT__<seq>,
// as InterProcessReadWriteLock names them. All are ephemeral and
// sequential; a queue is ordered by its sequence numbers, as Curator orders
// it. Each waiter watches only the znode it waits for (no herd): the one
// just ahead of it, or for a reader the nearest writer ahead; its deletion
// is the only change that can let the waiter hold, so a handoff sends one
// watch event per waiter it frees. An
// uncontended Lock costs two round trips (the create; then the new znode's
// stat and the queue's listing, sent together), Unlock one. So:
//
//   - a disco lock and an InterProcessMutex on the same path exclude each
//     other, served in the order they queued; and since LeaderSelector is
//     built on an InterProcessMutex, a disco lock on a LeaderSelector's path
//     takes part as one of its participants;
//   - a disco election and LeaderLatch participants on the same path agree
//     on who leads; Leader and Observe report a LeaderLatch leader with its
//     id as Value, and LeaderLatch.getLeader reports a disco leader with its
//     value as id;
//   - disco and InterProcessSemaphoreV2 owners on the same path with the
//     same number of permits never hold more permits together (see
//     NewSemaphore: slots and tokens are disco's alone); a disco
//     TryAcquire waits a second at most for the internal mutex (an owner
//     that holds it longer has stalled), then fails with ErrNoPermit,
//     where Curator's zero-wait acquire gives up at once whenever another
//     owner is ahead in the mutex's queue;
//   - a disco barrier and a DistributedBarrier on the same path are one
//     barrier, and disco and DistributedDoubleBarrier parties on the same
//     path with the same count enter and leave together (see Barriers);
//   - not interoperable: a disco election with LeaderSelector (different
//     layout), Curator's read/write lock, InterProcessSemaphoreV2 with a
//     SharedCount as its number of permits, and revocation; and a
//     disco lock is not reentrant, as InterProcessMutex is per thread.
//
// Children of the path that do not end in "lock-<digits>" (or
// "latch-<digits>", "__READ__<digits>", "__WRIT__<digits>") are not in
// disco's queue; a lock and a read/write lock on one path do not see each
// other; Curator sorts them too, so do
// not put other znodes there. Missing parents of the path are created as
// persistent znodes (Curator makes containers; either works for both).
//
// Names are independent: a primitive on /n never takes the znodes of
// /n/sub as its own (the persistent znode "sub" is not in /n's queue). So
// that no name can collide with disco's own znodes, a path is refused, with
// an error wrapping ErrInvalidArgument (and primitives.ErrInvalidArgument),
// if a segment of it ends in EpochSuffix (a read/write lock's epoch znode
// is its path + EpochSuffix) or in a queue marker and digits (it would be
// taken for a member of its parent's queue); so is /zookeeper and below,
// and any character ZooKeeper refuses in a path.
//
// # Following who leads
//
// An election follows who leads (for its LeaderChanged events and its
// Observe channels) only while someone listens: a Subscribe or an Observe
// whose context lives. A candidate nobody listens to only waits for its
// turn, watching the znode ahead of its own, so a failover wakes the next
// candidate alone however many wait, on one session or many.
//
// The listened-to elections of one session on one path share one follow:
// one watch at a time, and one read per change of it. While someone leads
// it watches the leader's znode, whose deletion or new value (Proclaim) is
// the only change that can change who leads (a newcomer queues after every
// znode there); while nobody leads, the path's children. After the
// leader's znode is gone, the read is of the znodes the last listing showed
// queued next, the first that still exists leading; the queue is listed
// again once they are gone. So observers cost a session one watch event
// and, as a rule, one small read per change of leader, however many of its
// candidates are observed.
//
// When an election starts following, its first read publishes
// LeaderChanged (and its observers' update) only if the leader differs
// from the last one it published (none at first); from then on, every
// change of leader its session sees. Observe's first value comes from a
// read started after the call and synced, so no older than the call. The
// follow stops when the last listener's context ends or the election is
// closed; the watch it leaves (the ZooKeeper client cannot remove one) is
// taken over by the session's next follow of the path, or goes when it
// fires.
//
// # Barriers
//
// A barrier (NewBarrier) is held while the persistent znode <path> exists,
// as Curator's DistributedBarrier keeps it: Hold creates it (and its
// missing parents), with a value of the holder's own as data; Release
// deletes it; Wait returns once it is absent, watching it. Made with
// servers, a barrier connects a session of its own for each call and ends
// it before the call returns (there is nothing to close); with
// WithSession, its calls run on that session. No other name may be below
// a barrier's path: while znodes are under it (a lock's on <path>/sub,
// or the persistent parent such a lock leaves) the barrier is held, and
// Release fails with an error wrapping ErrInvalidArgument, as ZooKeeper
// deletes no znode that has children.
//
// A double barrier's party (NewDoubleBarrier) is the ephemeral znode
// <path>/<uuid>, and <path>/ready, persistent, exists from when count
// parties have entered until they have left, as Curator's
// DistributedDoubleBarrier keeps them. Enter creates the party's znode and
// waits for ready, creating it when its own listing counts count parties;
// Leave follows Curator's algorithm (the lowest party, by name, waits for
// the highest, every other deletes its znode and waits for the lowest, the
// lowest deletes its own once alone). The last party to find no party left
// deletes ready, then <path> if it is empty. A party lives on its session:
// once the session is lost, its znode is gone and the others do not wait
// for it.
//
// Among disco parties count is a limit: Enter refuses with ErrFull once
// count parties are in or ready exists, and every disco entry, withdrawal
// and creation of ready is one transaction with a write of <path>'s data at
// the version of the listing it counted, so that two parties never both
// take the last place and ready never counts a party that withdrew. A
// Curator party writes no such version (for Curator count is a threshold,
// not a limit), so a mixed group keeps what Curator keeps: its parties
// enter once count are in and leave together, and more than count may
// enter. A Curator party that entered with a timeout that passed leaves its
// znode (Curator does not withdraw it), which counts as a party until its
// session ends. Barriers carry no fencing tokens.
//
// Enter and Leave wait for ZooKeeper until their ctx ends, as every
// caller does. An Enter that gives up withdraws its znode, waiting for
// ZooKeeper's answer half a second at most; what ZooKeeper answers later
// (the withdrawal, or the join itself) a session helper settles while the
// session lives: it deletes the party's znode even if a party counted it
// meanwhile (the Enter has failed), and clears a round that this leaves
// with no party. A Leave's request left running does what Leave asked of
// it (its delete: a later Leave finds the party out). The party's Close
// waits for these writes and their settling (see Close below): no znode
// of the party's is left, nor appears, once it returned.
//
// Each Wait, Enter and Leave sets at most one watch at a time; one whose
// ctx ends leaves it registered (the ZooKeeper client cannot remove a
// watch) and the next call of the same barrier or party on that znode
// reuses it; it goes when the znode changes or the session ends.
//
// # Fencing tokens, Created and LeaseID
//
// A grant's Key is its znode's path; its LeaseID is the ZooKeeper session
// id (Session.LeaseID, the znode's ephemeralOwner); its TTL the session
// timeout the server granted (Session.TTL). A hold's token is the czxid of
// its znode, the zxid of the transaction that created it; Created is the
// same number, for a read/write lock too (whose tokens come from its epoch
// znode, see below). A semaphore's grant is its lease: Key the lease
// znode, Created its czxid, Slot the slot it claimed, and its token the
// zxid of the claim (see NewSemaphore); its scope is "<path>#<slot>"
// (semaphore.Grant.Scope). Barriers carry no tokens.
//
// Why the token laws hold: a znode holds the lock (or leads) only when no
// znode with a lower sequence number is left in its queue, and ZooKeeper assigns sequence numbers and
// zxids in the same order, the one total order of its transactions. Take
// two holds, the first on znode a, the next on znode b. When a held, b
// either existed and so had a higher sequence number, hence a higher czxid,
// or was created later, hence a higher czxid. So tokens strictly increase
// from holder to holder, across sessions, servers and ensemble leader
// changes (a zxid's high half is the leader's epoch), and a term's token
// stays the same throughout it. Every Lock and Campaign creates a new znode,
// so no two holds share a token. A holder whose session died keeps its old
// token, which the successor's exceeds: a guard rejects the zombie. A
// Curator holder that wants to be fenced by the same guard can use its own
// lock znode's czxid. A read/write lock's tokens come from its epoch znode
// instead (see NewRWLock), so that readers holding together share one. (The order is Curator's too; it breaks, for both,
// only after 2^31 sequential znodes under one path.)
//
// # Loss, suspension and resumption
//
// The ZooKeeper server expires a session when it has heard nothing from it
// for the session timeout (the one the server granted, which the session
// learns at connect). Every request the server answers renews the session;
// the session counts the same deadline from the send time of the last
// request the server answered (the client pings every third of the
// timeout), so it gives up no later than the server can have: the deadline
// errs by at most the time a request is in flight. When the connection
// breaks, or no request has been answered for WithSuspendAfter's part of
// the timeout (default half), every holder gets Suspended with that
// deadline: no one else can acquire before it. Once a request sent after
// that is answered (the client reconnects to any server of the ensemble
// before the deadline, with the same session), holders get Resumed. A
// server's answer that the session expired (it was expired or killed
// there before the deadline) resumes nothing: a holder suspended at the
// disconnect that came first then gets Lost. The
// session is lost when the deadline passes, when ZooKeeper reports it
// expired, or when its connection closes under it; then every primitive on
// it gets Lost for what it held, its waiters fail, Done closes, and every
// later call fails with an error wrapping primitives.ErrLost. The session
// then closes its client: the ZooKeeper client would otherwise open a new
// session, without the holds.
//
// If a held znode is deleted by someone else while the session lives, only
// that hold ends, with Lost; the primitive stays usable. A hold watches its
// znode once it is 100 ms old (driver.HoldWatchAfter), or once a release
// under way then has failed; a wait once it is a quarter of the TTL old: a
// short hold or wait costs no watch of its own, and its release fires
// none; a deletion is noticed then, or at once after. A hold whose release
// failed ends Released when its znode goes (the failed delete may have
// landed).
//
// Close deletes what the primitive holds and withdraws its waiting
// acquisition before it returns, so others proceed at once rather than
// after the session timeout; on its own session it also ends the session.
// With them, it waits for what its acquisitions left under way on the
// session's helpers: a create answered after its caller left (or the
// primitive's Close began), whose znode is then deleted, a withdrawal
// ZooKeeper had not answered in half a second, the deletes of these tried
// again while they fail with the connection, and an acquisition's read of
// its own znode's creation zxid. A double barrier's party waits so for
// what its Enter and Leave left running: a join (its znode then
// withdrawn), a withdrawal and its settling, a create or clear of ready,
// a delete of its znode. So once Close returns, with ZooKeeper answering
// however slowly, nothing the primitive wrote is left. On a shared
// session that wait too is bounded by the 10 seconds below; what is still
// under way then is deleted once ZooKeeper answers, and Close returns an
// error wrapping context.DeadlineExceeded (a helper that retries a delete
// until the session ends, a lock's or a double barrier party's, is waited
// for within those 10 seconds).
//
// Close does not wait for a create of a missing parent (of a lock's path,
// of a party's path or above) left running: what it makes is a persistent
// znode that is no primitive's own (every primitive and party on the path
// shares it and it outlives them, as the parents Curator's recipes make
// do), that an answer in time would have left all the same, and that
// decides nothing: turns, counts and ready rest on the ephemeral znodes
// (and a party's transactions on <path>'s data version, read with them),
// and the create makes a znode only where none is, an empty one. A caller
// that deletes the path after Close and must see no such create land
// later closes the session: Session.Close returns once every request its
// primitives left running is done.
//
// On a shared session, a delete that fails with the connection is tried
// again for up to 10 seconds; a znode still left then is deleted once the
// session reaches ZooKeeper again, or goes with the session, and Close
// returns an error that names it. On its own session a primitive tries the
// delete once, then ends the session (Session.Close): the server deletes
// the session's znodes when it ends it. Session.Close waits a second for
// the server's answer; if none comes, it returns an error wrapping
// context.DeadlineExceeded, and so does the Close of a primitive on its
// own session: the server ends the session, and deletes its znodes,
// within its timeout. So in an outage Close returns within the session
// timeout, and no goroutine of the session or of its ZooKeeper client
// outlives it.
package zkio
