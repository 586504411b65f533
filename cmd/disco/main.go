// Command disco drives disco's etcd primitives from a shell: run a command
// while holding a lock or leading an election, with its fencing token in
// the environment; watch an election; show who holds and waits under a
// prefix; and run a single-member etcd for local development.
//
// Exit statuses: CMD's own status; 1 for an error of disco's (etcd
// unreachable, a request timed out); 2 for bad usage; 3 when the lock or
// the leadership was lost while CMD ran (CMD was then terminated), or its
// release (or resignation) after CMD found it lost; 126 or
// 127 when CMD could not be started or found; 128+N when disco was ended by
// signal N before CMD started, or CMD was killed by signal N.
//
// CMD runs in a process group of its own, and none of that group outlives
// the hold: disco kills what is left of it before releasing, and a watcher
// process (disco re-executed) kills it should disco die, even of SIGKILL.
// A process that leaves the group (setsid) escapes. disco runs on Linux
// only (it reads /proc and uses Linux's death signal).
//
// A NAME starts with "/" and does not end with "/"; disco refuses others,
// and a NAME the service refuses (its library's CheckName), with status 2
// before it connects. The keys of a name nested under NAME are not NAME's.
package main

import "os"

func main() {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runRole(role)) // disco re-executed as a helper of its own
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
