// Package memio is disco's in-memory backend, for unit tests of code that
// takes a lock, leads an election or waits at a barrier: no server, and no
// waiting for real TTLs. It is the real contract, not a mock: it passes
// every section of disco's conformance suite, as etcdio, zkio and redisio
// do.
//
// A Store is one coordination service (one "cluster"): every session and
// primitive made on it shares its keys, and its revision orders them:
// tokens are revisions, strictly increasing from grant to grant of one
// name (an election's token is its candidate's creation revision, and the
// readers of one read epoch share theirs, as on etcd). Several services
// on one Store contend as several clients of one etcd do.
//
//	st := memio.NewStore(memio.WithClock(clock)) // clock: a *memio.FakeClock
//	l, _ := memio.NewLock(st, "/jobs")
//	g, _ := l.Lock(ctx)
//
// # Faults on cue
//
// What a real backend does when things break is a method a test calls:
//
//   - Session.Suspend: the holders get Suspended at once, with the deadline
//     one TTL away; the session expires then unless Resume comes first.
//   - Session.StopRenewals: a partition; Suspended after the suspension
//     part of the TTL (WithSuspendAfter), Lost at the deadline.
//   - Session.Resume: renewals reach the store again; Resumed.
//   - Session.Expire: Lost now; the keys go and others acquire with higher
//     tokens.
//   - Session.Pause: a garbage collection pause; renewals stop and every
//     request of the session waits until the pause ends.
//   - Session.FailNext: the next request fails, changing nothing.
//   - Store.DeleteKey: another client deletes a key: its holder is told
//     Lost (and stays usable), its waiter fails.
//
// SessionOf finds the session of a primitive made without WithSession.
// A FakeClock makes the TTLs and deadlines deterministic: Advance moves it
// and runs what falls due before it returns.
//
// # What the values are here
//
// A lock's, a writer's and a semaphore slot's token is the Store's revision
// at the grant; readers holding together share the revision at which their
// read epoch began; a leader's token is its key's creation revision.
// Created is the key's creation revision, LeaseID the session's number.
// Key names are the name, the queue ("read/", "write/" for an rwlock), the
// session's number and the key's revision: "/jobs/3-17".
//
// # Options
//
// The options every disco backend shares (see primitives/driver), with the
// same defaults: WithTTL (10 s), WithSuspendAfter (1/2),
// WithCancelOnSuspend, WithMetrics, WithLogger, WithContext, WithSession;
// and WithMaxValueSize (1 MiB). WithClock configures the Store.
//
// # Map
//
// memio is a driver of primitives/driver: each primitive is a service that
// embeds a driver.Shell; each session keeps a driver.Clock, consulted only
// while its renewals are stopped. The Store's one mutex serialises
// everything and stands for the event loop of every session on it (there is
// no goroutine per session). store.go holds the keys and queues and decides
// who holds (settle) and with which token; session.go the sessions and
// their faults; service.go what every primitive shares; lock.go,
// election.go, semaphore.go and barrier.go the primitives.
package memio
