package faultsuite

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// Cluster is a backend's servers under test, as the suite drives them. A
// round's workers each reach the servers through a site of their own (an
// etcd member, a ZooKeeper client's proxies, a Redis client's proxy), so
// that a fault can cut one worker off and leave the others running.
type Cluster interface {
	// Name names the backend in the report: "etcd", "zookeeper", "redis".
	Name() string
	// Sites is how many sites there are; worker i uses site i%Sites().
	Sites() int
	// TTL is the session TTL (or timeout) of every client in the rounds:
	// short, so that a partition or a pause outlasts it quickly.
	TTL() time.Duration
	// Dial returns a client that reaches the servers through site only.
	Dial(site int) (Client, error)
	// Faults are the cluster's own faults; the suite adds Pause.
	Faults() []Fault
	// Restore undoes every fault: every server running and serving, no
	// site cut off or slowed.
	Restore(ctx context.Context) error
	// Forgotten reports whether the store no longer holds the hold at key
	// of the session lease (its lease, session or key is gone), asked
	// through a site other than site.
	Forgotten(ctx context.Context, site int, lease int64, key string) (bool, error)
	// Leftover returns the keys (znodes) under root that closed clients
	// must not leave behind: every key, less the ones the backend
	// documents as kept (etcd's read/write lock epoch, Redis's counters).
	Leftover(ctx context.Context, root string) ([]string, error)
}

// Owners is a Cluster that can tell the keys a session owns while it lives
// (etcd: a key's lease; ZooKeeper: an ephemeral znode's owner; Redis: a
// hold's session). Owned returns those of the session lease under root.
// For such a cluster the suite checks that a primitive's Close on a live
// session leaves none of the session's keys behind: the session's own
// end, which would delete them, does not hide what the Close forgot.
type Owners interface {
	Owned(ctx context.Context, root string, lease int64) ([]string, error)
}

// Client is one worker's connection to the cluster, through its site.
type Client interface {
	// NewSession returns a new session with the given TTL.
	NewSession(ttl time.Duration) (Session, error)
	Close() error
}

// Session is one session of a client and the primitives made on it.
type Session interface {
	NewLock(prefix string) (lock.Service, error)
	NewRWLock(prefix string) (rwlock.Service, error)
	NewElection(prefix string) (election.Service, error)
	// Err is nil while the session is live; then it wraps
	// primitives.ErrLost or primitives.ErrClosed.
	Err() error
	Close() error
	// Hook is what testhook.PauseSession pauses: the backend's session.
	Hook() any
	// LeaseID is the session's lease (ZooKeeper: session) id, as grants
	// carry it.
	LeaseID() int64
}

// Fault is one thing the nemesis does in a round.
type Fault struct {
	Name string
	// Plan chooses where the fault strikes this round.
	Plan func(ctx context.Context, rng *rand.Rand) (Plan, error)
}

// Plan is one fault as the nemesis applies it: it seizes a victim's hold if
// Seize asks, breaks something, keeps it broken as While says, heals it.
type Plan struct {
	// Target names what breaks, for messages ("member 2", "the server").
	Target string
	Seize  Seize
	// From is the site whose next hold the nemesis seizes; -1: any.
	From int
	// Break injects the fault; site and lease are the victim's (From and
	// 0 if no hold was seized).
	Break func(ctx context.Context, site int, lease int64) error
	// Heal undoes it.
	Heal  func(ctx context.Context) error
	While While

	pause bool // the suite's own fault: the victim's session and application freeze
}

// Seize says whether a fault takes a hold first: the worker that holds it
// goes on as a zombie, with its old token, while the fault lasts.
type Seize int

const (
	NoVictim   Seize = iota
	VictimSoon       // the next hold on From within 5 s, if any
	Victim           // the next hold on From within 30 s; the round fails without one
)

// While says how long a fault lasts.
type While int

const (
	// Progress: the others keep writing while it lasts (a quorum is left):
	// it lasts until they wrote 5 more times and, with a victim, until the
	// victim's hold is forgotten and a successor has written.
	Progress While = iota
	// Expiry: it lasts until the victim's hold is forgotten and a successor
	// has written (a partition or pause of the victim only).
	Expiry
	// Outage: no one can write while it lasts (the only server is down):
	// it lasts one TTL and a second, so that every session's clock runs
	// out; a victim's hold must be forgotten after healing.
	Outage
)

// Pause is the suite's own fault, offered on every backend: it freezes a
// holder's session (testhook.PauseSession) and application, as a long GC
// pause would, until its hold is forgotten and a successor has written.
var Pause = Fault{Name: "pause", Plan: func(context.Context, *rand.Rand) (Plan, error) {
	return Plan{Target: "a holder", Seize: Victim, From: -1, While: Expiry, pause: true,
		Break: func(context.Context, int, int64) error { return nil }, Heal: func(context.Context) error { return nil }}, nil
}}
