// Package safety tests that disco's fencing guarantee holds on etcd while
// things break. It has no code of its own beyond this comment: everything
// is in its tests, which run against a real three-member etcd cluster
// started in the test binary (package embedded), with a fault-injecting
// proxy in front of every member.
//
// TestSafetyFaults and TestSafetyLong run disco's fault suite (package
// internal/faultsuite, which says what it checks) with the cluster's
// faults: a member stopped and restarted (the raft leader too), a holder's
// member cut off from its clients until the holder's lease has expired and
// someone else has written, a member slowed down, and the suite's pause.
// Each worker reaches one member only.
//
// Misuse tests cover bad input to every constructor, double Unlock, Resign
// and Close, calls after Close, prefix overlap on one session, and stale,
// malformed and replayed tokens at the guard, each with a clear error and
// nothing left in etcd; hardening, barrier, supervision and suspension
// tests cover the same primitives under one fault at a time.
//
//	go test -run Safety -v ./etcdio/safety/
//	DISCO_SAFETY_LONG=1 go test -run Safety -v ./etcdio/safety/
package safety
