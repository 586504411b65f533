// Package redisio is disco's Redis backend: a Session that owns one
// liveness key and one event loop, and the lock, read/write lock, election
// and semaphore that run on it, with fencing tokens that a guard (package
// fencing/guard) can check, and a barrier and a double barrier (package
// primitives/barrier), which carry no tokens. The constructors have
// etcdio's shape: NewSession(cli, opts...), NewLock, NewRWLock,
// NewElection and NewBarrier(cli, name, opts...), NewSemaphore(cli, name,
// n, opts...), NewDoubleBarrier(cli, name, count, opts...).
//
//	cli := redis.NewClient(&redis.Options{Addr: "redis:6379"})
//	l, err := redisio.NewLock(cli, "orders")
//	defer l.Close()
//	err = lock.Do(ctx, l, func(ctx context.Context, g lock.Grant) error {
//		return write(ctx, g.Token()) // every request carries the token
//	})
//
// Read the safety contract below before you rely on the tokens: they
// rise only while the name's counter cannot go back (one primary,
// appendfsync always), and they compare only within one name.
//
// It is built on github.com/redis/go-redis/v9: a maintained client whose
// redis.Script runs a Lua script by EVALSHA and falls back to EVAL when the
// server does not know it (after a restart, say), and whose PubSub resubscribes
// by itself after a reconnect. Every state change here is one Lua script;
// the pub/sub connection wakes waiters.
//
// # Tokens, Created and LeaseID
//
// A grant's Created is its hold's number: the increment of the name's
// counter (name/seq) that the enqueue script took, also the number in the
// hold's key name/<Created>; it names the grant (Release, ResignTerm and
// the events match by it). A lock's or rwlock writer's token is a further
// increment of the same counter taken in the script that grants it; an
// rwlock reader's is its read epoch's; an election term's is its Created.
// A semaphore's token is a further increment of the counter taken in the
// script that grants the hold its slot, as a lock's is.
// LeaseID is the session's id, the number in its key disco/session/<id>.
//
// # Options
//
// NewSession, NewLock, NewRWLock, NewElection, NewSemaphore and
// NewDoubleBarrier take (NewBarrier refuses WithSession, WithTTL and
// WithSuspendAfter: a barrier has no session; the others have no effect on
// it):
//
//   - WithTTL(d): the session's time to live, its key's PX expiry (default
//     DefaultTTL, 10 s, as every backend; at least MinTTL, 100 ms).
//   - WithSuspendAfter(p): the part of the TTL without an acknowledged
//     refresh after which holders get Suspended (default
//     driver.DefaultSuspendAfter, a half).
//   - WithCancelOnSuspend(): lock.Do, rwlock.DoRead, rwlock.DoWrite and
//     election.Lead end fn's context at Suspended (default: only at Lost).
//   - WithMetrics(m): report to m (default nil: nothing recorded); a
//     primitive made WithSession without it reports to its session's.
//   - WithLogger(l): log through l (default silent).
//   - WithContext(ctx): bounds construction only (default: 10 s).
//   - WithSession(s): run on an existing session (default: a session of the
//     primitive's own, closed by its Close); not with WithTTL or
//     WithSuspendAfter, which are the session's.
//   - WithMaxValueSize(n): the largest election value (default
//     DefaultMaxValueSize, 1 MiB).
//
// Bad options are errors wrapping primitives.ErrInvalidArgument.
//
// # The safety contract
//
// A token (a semaphore's too: strictly greater than every token issued
// before for the name, so for its slot's scope name#slot) is strictly
// greater than every token issued before it on the same name only while
// the name's counter cannot go back. That holds on a single primary that
// writes every change to its append-only file before it answers:
// appendonly yes with appendfsync always. It also survives a
// restart of that server: TestTokensRiseAcrossRestartWithAOF shows it.
//
// It does not hold when the counter can be forgotten: no persistence (a
// restart starts the counter again, TestTokensGoBackWithoutAOF), appendfsync
// everysec (up to a second of increments lost in a crash), or an
// asynchronous failover to a replica that had not received the latest
// increments. Then a token can be handed out again: two holders may carry
// the same token, which a guard treats as equal and admits both; or a new
// holder's token is below the guard's mark and it is refused. redisio
// offers no protection against that (no WAIT for replicas); a semaphore's
// slots rest on the same state, so such a failover can also give a slot
// whose grant was forgotten to a second holder, with a token the first
// may equal. Run it on one primary with appendfsync always, or use a
// backend with consensus (etcdio) where failover must be safe. There is no Redlock: a majority of
// independent Redis servers without fsync gives no token that a resource
// can trust, and a lock without a token cannot stop a paused owner.
//
// Barriers have no token and nothing to fence: a party that passed a
// barrier too early cannot be stopped by Redis or a guard. What the store
// loses, they lose:
//
//   - A barrier (name/barrier, no expiry) on one primary with appendfsync
//     always survives a restart as its last acknowledged Hold or Release
//     left it. A Wait's pub/sub connection drops with the server; go-redis
//     resubscribes, and a Release it did not hear is seen by its re-check
//     within a second. Without that persistence, or after an asynchronous
//     failover, a Hold can be forgotten (a Wait returns while the holder
//     thinks it is held) or a Release (the barrier is held again after
//     waiters passed it; later Waits block until someone releases it).
//   - A double barrier's parties live as their sessions do: Redis keeps
//     the keys' expiry times through a restart with appendfsync always,
//     so parties whose sessions' deadlines pass while it is down are lost
//     (their Enter or Leave fails with an error wrapping
//     primitives.ErrLost, Done closes) and the next script drops their keys;
//     the others go on once Redis answers, woken by their re-checks. A
//     round's hash has no expiry: an abandoned round (every party gone) is
//     replaced by the next Enter. An asynchronous failover can forget the
//     latest scripts: a forgotten Enter makes a waiting party fail with
//     ErrLost (its key is gone) or, if it was the count-th, leaves parties
//     that had not yet seen the round full waiting for one more while the
//     others have entered; a forgotten Leave puts a key back that its
//     departed owner no longer refreshes, so the others wait until it
//     expires (a TTL at most). Enter together and leave together hold
//     only where the store does not go back; use etcdio where that matters.
//
// Mutual exclusion itself rests on expiry: a holder whose session key
// expires (it paused, or lost its connection) is no longer the holder in
// Redis, while it may still believe it is until its loop notices. The token
// and a guard in front of the resource are what make such a holder
// harmless; see TestPausedHolderIsFencedByGuard.
//
// # Running Redis for redisio
//
//   - appendonly yes, appendfsync always: the contract above.
//   - maxmemory-policy noeviction: an evicted counter starts tokens again;
//     an evicted session or hold key ends a hold early.
//   - One server (or one primary): not Redis Cluster (see Keys).
//   - Client retries: go-redis sends a command again when its reply does
//     not come (MaxRetries, 3 by default). redisio sends the scripts that
//     queue or release a hold at most once each and repeats them itself,
//     while the caller's context and the session live (an enqueue's
//     repeats end with its primitive's Close too): a repeated enqueue
//     first looks for the hold the attempt whose reply was lost queued (by
//     the attempt's nonce) and keeps it; a repeated release that finds its
//     hold gone counts it released (it cannot tell its own lost attempt's
//     delete from the key's expiry, so such an Unlock returns nil where
//     the hold may have been lost just before). A failed enqueue's hold is
//     withdrawn by its nonce, the search repeated on a session helper
//     until Redis answers; one the search misses (its script ran after the
//     search) is refreshed by nobody and blocks the name until its key
//     expires. A barrier's Release is sent once and repeated the same way.
//     The other scripts answer a second run as they did the first (a
//     waiter's check, a refresh, a barrier's Hold, which finds the key
//     holding its own id, a double barrier's Enter, which finds its party
//     counted) and keep go-redis's resends.
//
// # Keys
//
// A session is the key disco/session/<id> (id from the counter
// disco/sessions; an id whose key exists is skipped), with a PX expiry of
// the TTL. A primitive's name (as its user passes it) is its scope; its
// keys are name/seq (the counter: every hold's Created, and every lock
// token), name/queue (a sorted set of hold keys by Created), name/held (a
// hash recording each granted hold with its session, and a copy of the
// counter), name/<Created> (one hold: a hash naming its session, with the
// session's expiry), for an rwlock name/rtok (the read epoch's token), and
// the pub/sub channel name/wake (a session's own channel is its key's
// name); for a semaphore (the lock's layout, a
// hold's value being its slot) name/permits, its N, never deleted. A
// barrier's key is name/barrier (channel name/barrier.wake); a double
// barrier's are name/dbarrier, name/dbarrier.parties and one
// name/dbarrier.<session>.<n> per party (channel name/dbarrier.wake): no
// suffix of the lock layout, so a barrier and a double barrier may share a
// name with each other and with any other primitive (TestBarriersShareNameWithLocks).
// Otherwise a name is one primitive: a lock, an rwlock, an election and a
// semaphore must not share one (services of the same kind on one name
// contend, whatever their sessions). Names are
// independent: every key of a name is name/ and one segment without "/",
// so a name's keys are never another name's (a/b's keys are not a's). The
// names disco/session and disco/sessions and every name below them are
// refused (an error wrapping primitives.ErrInvalidArgument): disco keeps
// those trees for the session keys and their counter. The counter is never
// deleted: it is what keeps tokens rising. The scripts address
// keys they compute, so a name's keys and the session keys must live on
// one server: Redis Cluster is not supported.
//
// # Grants and tokens
//
// Lock and Campaign run one script that takes the next Created from the
// counter, writes the hold and queues it; if nobody is ahead it is granted in
// that same script. Otherwise the caller waits until its hold heads the
// queue, and one script grants it: the release of the hold before it, which
// grants the new head in the same step (one write per handoff), or the
// waiter's own look if it finds itself at the head ungranted (the hold
// before it died). A lock's token is a new increment of the counter in the
// granting script (grant and token are one step); an election's
// token is its hold's Created, which rises from term to term because
// candidates lead in the order they queued. An rwlock's readers and writers
// share one queue: a writer is granted at its head, a reader when no writer
// is ahead of it; a writer's token is a new increment and ends the read
// epoch, and the first reader after it opens the next epoch with a new
// increment that the readers granted until the next writer share (see
// NewRWLock). Waiters are served first come, first served. Unlock, Resign
// and Close run one script that deletes the hold, grants the next (a lock
// or an election) and publishes its key to its session (see Waking
// waiters).
//
// A hold lives while its key exists: the key carries its session's expiry,
// set with the session key's at every refresh. A granted hold whose key is
// found gone while it is still queued and its session's key exists gets a
// tombstone in its place that lives until the session's present expiry. Every
// script that looks at a queue removes dead holds from its front, so a
// waiter behind a holder whose session expired takes over at its next look.
//
// # Deleted keys
//
// The layout is redundant: deleting any one of its keys behind an owner's
// back never gives a name two holders, and tokens still rise. A granted
// hold is both queued and recorded in name/held, and heads the queue
// whatever the queue says; a script that finds it missing from one puts it
// back, and a waiter missing from the queue puts itself back at its
// Created (its next look, at most the re-check interval). The counter is
// the greater of name/seq and its copy in name/held. A session key that is
// deleted leaves its holds alive until their keys expire; a new session
// never takes a live session's id. Deleting name/rtok only makes the next
// reader of the epoch open a new one with a higher token.
//
// Deleting a hold's key, or its session's key, ends the hold (a deleted
// hold key is replaced by a tombstone, which the owner's refresh reports
// gone): its owner is told Lost when its session's next refresh is
// acknowledged, within TTL/3 and a round trip while Redis answers, at the
// latest at the session's deadline. Only then does a helper take the dead
// hold out of the queue (the owner's own next acquisition waits for that
// round trip, so that it does not find its dead hold ahead). Until the
// owner has been told, nobody else is granted the name (if the owner is
// gone, not before the hold's key or tombstone expires, which is no
// earlier than that deadline): a successor holds only after the Lost, with
// a higher token (TestLostBeforeSuccessor).
//
// # Waking waiters
//
// A waiting Lock, RLock, Acquire or Campaign is its caller's goroutine.
// Each session's one pub/sub connection listens on a channel of its own,
// named as its key (disco/session/<id>). A script that makes a waiting
// hold grantable (a release, which grants a lock's or an election's next
// head in the same step; a grant that lets the next reader or permit
// holder in; a look that removed dead holds) publishes the hold's key on
// the channel of the hold's session, and the loop hands it to that
// waiter: a handoff sends one message, to one session, whatever the number
// of contenders (TestLockHandoffSendsOneWakeMessage). An rwlock reader
// that is granted wakes the hold behind it, so that readers queued
// together follow each other in. A message can reach the session before
// the waiter it names is registered there (the release ran between the
// waiter's enqueue and its registration): the session keeps the last
// such messages, and the waiter takes its own when it registers
// (TestWakeBeforeTheWaiterRegisters). A waiter makes no request before a
// message or its timed look.
//
// Each such message is also published on the name's channel, name/wake,
// as is an election's every change of who leads or of the leader's value,
// where the sessions that follow an election's leader listen (see
// Following the leader) and the waiters of a disco before this protocol,
// which listened there only. No waiter of this package listens there
// (a waiting candidate too is woken on its session's channel alone), so
// with no follower and no older disco on the name that second message
// reaches nobody (Redis looks the channel up and finds no subscriber).
// With an older disco, its waiters are woken by this package's releases
// as before, and this package's waiters behind its releases, whose
// messages go to name/wake only, are granted at their next timed look
// (TestPreviousWakeProtocolTogether): during a rolling upgrade such a
// handoff takes up to the re-check interval.
//
// Because a session that expires publishes nothing, and a message can be
// missed around a reconnect, each waiter also looks again on its own: the
// re-check interval is TTL/4 (at least 50 ms, at most 1 s), and a waiter
// with fewer than 8 holds ahead of it at its last look looks again after
// a random half to all of it, drawn afresh each time, so that waiters
// queued together (a thousand candidates started at once) do not all
// look in the same instant. Further back the wait grows to two, three,
// then at most four intervals (with 8, 16 and 24 holds ahead): only
// the waiters a release or an expiry is about to reach need a prompt
// look, and a thousand waiters make about a quarter of the looks a
// thousand prompt ones would. A waiter that was far back at its last look
// and then missed its wake message holds within four intervals. A leader
// watch reads again at the full interval.
//
// # Following the leader
//
// An election's service follows who leads only while someone listens to
// it: a Subscribe (LeaderChanged) or an Observe, each for as long as its
// context lives (driver.Listeners counts them; election.Lead, which
// follows its term's own events alone, does not count). A candidate
// nobody listens to only waits for its own turn: it reads no leader, and
// its session does not subscribe to the name's channel for it, so a
// failover wakes the next leader's session alone, however many candidates
// and sessions campaign (TestFailoverWakesOnlyListenedSessions).
//
// The followed services of one session on one name share its leader
// watch: while the watch runs the session subscribes to name/wake, reads
// the head once at each message there and at each re-check, and hands
// every read to them all, so a change costs each following session one
// read, however many candidates it hosts. When a service starts to
// follow, the first read it gets publishes LeaderChanged (and an Observe
// value) only if that leader differs from the last one this service
// published (none at first); from then on each change of leader its
// session sees. Observe reads the head itself before it returns, so its
// first value is no older than the call. The watch, with its subscription,
// stops when the last listener's context ends or the last of its services
// ends.
//
// # The session loop
//
// Each Session runs one event-loop goroutine (package actor). The loop
// alone owns the session's state: the refresh deadline, each primitive's
// hold, its waiters' wake channels and an election's last known leader.
// Its rules:
//
//   - Nothing blocks the loop. Every Redis request runs elsewhere: an
//     acquisition's enqueue and a waiter's check (Lock, TryLock, RLock,
//     Campaign, Acquire, TryAcquire), a release's (Unlock, Release,
//     Resign), a Proclaim's and a double barrier's Enter's and Leave's
//     on a goroutine of the session, one per request under way, that its
//     caller waits for until its context ends (see Giving up); a
//     barrier's, which has no session, on a goroutine of its own the
//     same way; the session's own (refresh, an election's leader reads,
//     cleanup) on the session's helper goroutines. They post their results to the loop's
//     mailbox, which never blocks; the loop answers callers through
//     replies that never block either.
//   - Who may block: callers (on their reply or their script, until their
//     context ends) and helpers (each request bounded by a timeout, the
//     TTL at most, and by a Close's deadline: see Close below). Never the
//     loop.
//   - A slow subscriber never stalls the loop: events are queued per
//     subscriber; Acquired, Released, Lost, Suspended and Resumed are never
//     dropped or coalesced; LeaderChanged and Observe states may be
//     coalesced for a slow reader, the latest always delivered.
//   - Every call parked on a service is answered when the service ends.
//
// # Giving up
//
// An acquisition (Lock, TryLock, RLock, TryRLock, Campaign, Acquire,
// TryAcquire), a double barrier's Enter and Leave, a barrier's Hold,
// Release and Wait, and Proclaim return an error wrapping their context's
// error within half a second of its end, and one wrapping ErrClosed
// within half a second of the Close that ends their primitive, even
// while Redis does not answer; an Enter that
// must learn whether its round completed (see NewDoubleBarrier) waits
// half a second more for that answer. go-redis heeds a context only
// between commands (its deadline too, unless the client was made with
// ContextTimeoutEnabled), so each of these calls' requests runs on a
// helper goroutine while its caller waits, and the caller leaves it under
// way. With Redis answering, the call returns once what it queued is
// withdrawn; otherwise what a request it left wrote is undone when the
// request is answered (or, if Redis answers no more, expires with the
// session): the hold an enqueue queued (or a waiter's look granted) and
// the key a double barrier's Enter counted in are withdrawn, by a
// withdrawal also sent as the call returns (see NewDoubleBarrier): where
// Redis hears the caller but its replies do not reach it, the hold or key
// is out as soon as Redis runs that withdrawal, and meets no later
// TryLock or Enter. The key a barrier's Hold created is
// deleted (waking the Waits), by a Hold that fails with another error
// too (its script may have run, its reply lost), before it returns or
// within half a second; and the value a Proclaim set is put back
// (if no other was set since) to the term's, by a Proclaim that fails
// with another error too, before it returns. The Proclaims of one
// Election, and their undoing, change the value one at a time, the
// term's with it: a Proclaim's undo never overwrites a later one's value,
// and Redis's value is the term's (Term) once they are done. A Release
// or a Leave left under way may still release the barrier or take the party out when Redis runs it, as
// asked: a later call finds it so. The requests of a primitive with a
// session run on that session's helpers, on the client itself when its
// read and write timeouts are at most the TTL (go-redis's defaults are,
// under DefaultTTL), else on a clone of it bounded by the TTL, which runs
// none of the client's hooks: a request left under way ends within the
// TTL. Close of the primitive waits for its requests under way, and for
// the undoing of what they wrote, within its deadline (see Close). A
// barrier has no session: its requests run each on a goroutine of its
// own, on the client or a clone of it bounded the same way by 5 s, and
// neither a request left under way nor its undoing begins an attempt
// more than 5 s after it began.
//
// # Loss, suspension and resumption
//
// A helper refreshes the session every TTL/3 with one script that sets the
// session key's PX expiry, and its holds' keys', to the TTL and reports
// which hold keys are gone. A refresh does not wait for the one before it
// (at most three are under way, each giving up after the TTL), so one
// whose reply is lost, or a Redis slower than TTL/3 to answer, holds back
// no other. The server set the expiry no earlier than the request was
// sent, so the session's clock (driver.Clock) counts the
// deadline from the send time of the latest acknowledged refresh, never
// from the reply's arrival. WithSuspendAfter's part of the TTL (half by
// default) without an acknowledgement, or a refresh that finds the
// connection broken (refused, reset: not a mere timeout), brings Suspended
// (with that deadline) to every holder; an acknowledgement in time of a
// refresh sent after that brings Resumed. A hold granted while the session
// is suspended gets Suspended, with the same deadline, right after its
// Acquired. At the deadline, or at once when Redis says the session key is
// gone, the session is lost: every primitive gets Lost for what it held,
// its waiters fail, Done closes, and every later call fails with an error
// wrapping primitives.ErrLost. A hold whose key alone is gone (deleted by
// someone) ends with Lost (see Deleted keys) and the primitive stays
// usable. Close instead ends the primitives at once (Released for what
// they held) and deletes the holds and the session key before it returns,
// so others proceed at once rather than after the TTL.
//
// # Close
//
// Close, of a Session or of a primitive, returns within the session's TTL
// (WithTTL, DefaultTTL by default; a shared session's for a primitive made
// WithSession), whatever the client's timeouts. One deadline, the TTL
// after the call, bounds everything it waits for: an acquisition under
// way withdrawing its hold (and the requests it left under way, with the
// withdrawal of what they wrote), the deletes, and for a session, or a
// primitive on its own session, the session's helpers. Every request the
// session makes on its own behalf (a refresh, a release or withdrawal,
// an Unlock's or a Resign's too, which may run on after its caller's
// context ended, a leader watch's read) ends by that deadline, however
// the client's ReadTimeout compares: an attempt that the client's
// timeouts would carry past it runs on a clone of the client with shorter
// ones, as a refresh does when the client's exceed the TTL (go-redis runs
// none of the client's hooks on such a clone). The session's pub/sub
// connection runs on such a clone too, with timeouts of a quarter of the
// TTL at most: when it breaks, go-redis opens it again, and Close waits
// for that handshake. So no goroutine of a closed session is left once
// Close returns. If Redis does not answer by then, Close gives up on what
// is not done, ends the session or the primitive all the same, and
// returns an error wrapping context.DeadlineExceeded that names what it
// gave up on; what it left in Redis expires with the TTL, as after a
// loss. In an outage Close takes the TTL, 10 s by default, and no more.
// An acquisition, a double barrier's Enter or Leave, or a Proclaim under
// way when Close begins returns an error wrapping primitives.ErrClosed
// within half a second (see Giving up).
//
// # Metrics
//
// With WithMetrics, the engine reports every primitive's grants, waits,
// holds, handoffs and losses (causes: lease_expired at the deadline,
// lease_revoked when the session key is gone, key_deleted); the session
// reports its suspensions, each acknowledged refresh's round trip and
// margin before the deadline, and how many messages its loop drains at
// once; an election reports each change of leader it sees while it
// follows the leader (see Following the leader).
//
// # Map
//
// redisio is a driver on disco's owner engine (package primitives/driver):
// the engine keeps each primitive's one hold at a time, its grant
// (driver.Hold), its events and its end, and the session's liveness
// (driver.Clock); redisio speaks Redis.
//
//   - scripts.go: every Lua script, and the keys they use.
//   - session.go: the Session, its loop (run) and its end (lose, Close).
//     refresh.go: the refresher and the session's clock (Suspended,
//     Resumed, the deadline). pubsub.go: the session's channel
//     subscriptions and wake-ups.
//   - service.go: one type, service, is every primitive, around a
//     driver.Shell; lock.go, rwlock.go and election.go are the public
//     methods over it, watch.go an election's leader reads (one leader
//     watch per session and name, while someone listens), semaphore.go
//     a semaphore's.
//   - queue.go: how an acquisition queues, waits and is granted.
//     grant.go: a hold's release and its loss to a deleted key.
package redisio
