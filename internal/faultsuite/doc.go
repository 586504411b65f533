// Package faultsuite is disco's fault suite, written once for every
// backend: it checks that the fencing guarantee holds while the servers
// and the network break. A backend's test supplies a Cluster (its servers,
// its sites, its faults); Default and Long run rounds against it and print
// one report, the same for every backend.
//
// Each round starts three workers, each reaching the servers through a
// site of its own (an etcd member, a ZooKeeper client's fault proxies, a
// Redis client's fault proxy), with its own session and one primitive on
// it: a lock, a read/write lock (readers and writers) or an election.
// While they hold, workers write to one register behind fencing, with the
// token they were granted, through two resources at once:
//
//   - an HTTP server behind guard.HTTPMiddleware, whose handler runs in the
//     critical section Admit grants and records when it enters and leaves it;
//   - a SQLite row updated with "... WHERE token <= ?", the check inside the
//     database, with a trigger logging every accepted update in order.
//
// Meanwhile a nemesis applies one of the cluster's faults (a Plan): it may
// first seize a holder's hold, whose worker then goes on as a zombie,
// writing with its old token for a bounded number of attempts, so that
// stale writes really reach the resources; it breaks something; it keeps
// it broken while the others progress (Progress), until the victim's hold
// is forgotten by the store and a successor has written (Expiry), or for a
// TTL while no one can write (Outage); then it heals. Pause, the suite's own
// fault, freezes a holder's session (testhook.PauseSession) and
// application like a long GC pause.
//
// After every round the checkers verify that
//
//  1. each resource accepted tokens in non-decreasing order, in its own
//     order, and every write a client saw accepted is there (nothing lost);
//  2. admitted critical sections with different tokens never overlapped;
//  3. the history of each register is linearizable (porcupine) for a
//     register with fencing: a write with token t succeeds only if t is at
//     least every token seen before, reads return the last accepted value;
//  4. after healing, someone acquires again within the TTL plus a few
//     seconds, and once every client is closed no key is left under the
//     round's root (but those the backend documents as kept); on a
//     cluster that can tell a live session's keys (Owners: etcd,
//     ZooKeeper, Redis), none of a session's keys is left once its
//     primitive has closed, before the session's own end would delete them;
//  5. a worker whose hold ended involuntarily had Done closed before its
//     next call returned, that call failed, and its subscription saw Lost.
//
// Default runs every fault twice, each time under another primitive, with
// a fixed seed (DISCO_SAFETY_SEED overrides it). DISCO_SAFETY_LONG=1 runs
// DISCO_SAFETY_ROUNDS rounds (default 200) of random scenarios instead and
// prints the report:
//
//	DISCO_SAFETY_LONG=1 go test -run Safety -v ./etcdio/safety/ ./zkio/safety/ ./redisio/safety/
package faultsuite
