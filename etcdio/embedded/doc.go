// Package embedded runs real etcd servers inside the current process, for
// tests, examples and benchmarks.
//
// Nothing here is a mock: every server is a genuine etcd member started with
// go.etcd.io/etcd/server/v3/embed, speaking the ordinary gRPC client protocol
// on loopback ports and persisting to a private temporary data directory that
// is deleted when it is closed.
//
// Three entry points cover the usual needs:
//
//   - [Start] runs a single member. It is ready to serve in well under a
//     second and is the default backend for tests and examples.
//   - [StartCluster] runs a cluster of several members (three by default).
//     Each member can be stopped and restarted with the same identity, data
//     and ports, and each sits behind a fault-injecting TCP proxy through which
//     all client traffic flows, so that a member can be cut off from clients
//     (blackholed) or slowed down (delayed) while the members still talk to
//     each other directly.
//   - [StartOrEnv] returns the endpoints of an external cluster when the
//     ETCD_ENDPOINTS environment variable is set (a comma-separated list), and
//     otherwise starts a single embedded member. Examples and benchmarks use it
//     so that the same program runs against either.
//
// Everything is quiet by default: etcd's server and raft logs are
// discarded unless a logger is supplied with [WithLogger], and clients made by
// [NewClient] and the NewClient methods log nothing. (gRPC's process-wide
// logger is left alone; by default it only prints errors.)
//
// Ports are loopback ports below the kernel's ephemeral range, reserved for
// the server or cluster until Close: the kernel never gives them to another
// socket, and other servers started by this package in any process never
// pick them, so a stopped member restarts on its own ports. Should a process
// that picks ports otherwise take one before a start binds it, the start is
// retried with fresh ports.
//
// etcd registers its Prometheus metrics in the process-wide default registry,
// so the metrics endpoint of any embedded member reports the totals of every
// etcd server running in this process.
package embedded
