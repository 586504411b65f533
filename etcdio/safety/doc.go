// Package safety tests that disco's fencing guarantee holds while things
// break. It has no code of its own beyond this comment: everything is in its
// tests, which run against a real three-member etcd cluster started in the
// test binary (package embedded), with a fault-injecting proxy in front of
// every member.
//
// Each fault round starts a few clients, each with its own etcd client
// (reaching one member only), its own Session and one primitive on it: a
// lock, a read/write lock (readers and writers) or an election. While they
// hold, clients write to one register behind fencing, with the token they
// were granted, through two resources at once:
//
//   - an HTTP server behind guard.HTTPMiddleware, whose handler runs in the
//     critical section Admit grants and records when it enters and leaves it;
//   - a SQLite row updated with "... WHERE token <= ?", the check inside the
//     database, with a trigger logging every accepted update in order.
//
// Meanwhile a nemesis breaks something: it stops and restarts a member (the
// raft leader too), cuts a holder's member off from its clients until the
// holder's lease has expired and someone else has written (a partitioned
// zombie), freezes a holder's session and application like a long GC pause
// (testhook.PauseSession) until the same has happened, or slows a member
// down. The zombie keeps writing with its old token, for a bounded number of
// attempts, so stale writes really reach the resources.
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
//     round's prefix (except the rwlock's documented epoch key);
//  5. a client whose ownership ended involuntarily had Done closed before its
//     next call returned, that call failed, and its subscription saw Lost.
//
// Misuse tests cover bad input to every constructor, double Unlock, Resign
// and Close, calls after Close, prefix overlap on one session, and stale,
// malformed and replayed tokens at the guard, each with a clear error and
// nothing left in etcd.
//
// By default a handful of rounds runs, one of each fault, with a fixed seed
// (DISCO_SAFETY_SEED overrides it). DISCO_SAFETY_LONG=1 runs
// DISCO_SAFETY_ROUNDS rounds (default 200) and prints a report:
//
//	DISCO_SAFETY_LONG=1 go test -run Safety -v ./etcdio/safety/
package safety
