package memio

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/metrics"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/rwlock"
)

// Store is one in-memory coordination service, as one etcd cluster is:
// every session, primitive and barrier made on it shares its keys, and its
// revision, which every write raises, orders them. Tokens and Created are
// revisions: a name's tokens are strictly increasing from grant to grant
// (see the package doc).
//
// A Store is safe for concurrent use. Its one mutex serialises everything
// on it: it is the event loop of all its sessions (see primitives/driver).
type Store struct {
	clock Clock

	mu       sync.Mutex
	rev      int64
	nextID   int64
	keys     map[string]*key   // every key, by name
	queues   map[string]*queue // by kind and name
	permits  map[string]int    // a semaphore name's number of permits, once set
	barriers map[string]*barrierState
	rounds   map[string]*round // double barriers' current rounds
}

// StoreOption configures NewStore.
type StoreOption func(*Store)

// WithClock makes the Store run on c (a FakeClock, or a user's own Clock)
// instead of the real clock.
func WithClock(c Clock) StoreOption { return func(st *Store) { st.clock = c } }

// NewStore returns an empty Store.
func NewStore(opts ...StoreOption) *Store {
	st := &Store{clock: realClock{}, keys: map[string]*key{}, queues: map[string]*queue{},
		permits: map[string]int{}, barriers: map[string]*barrierState{}, rounds: map[string]*round{}}
	for _, o := range opts {
		if o != nil {
			o(st)
		}
	}
	return st
}

// Keys lists the names of the keys under prefix (every key if prefix is
// empty), in order: holders' and waiters' keys, barrier keys.
func (st *Store) Keys(prefix string) []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []string
	for k := range st.keys {
		out = append(out, k)
	}
	for k := range st.barriers {
		out = append(out, k)
	}
	for _, r := range st.rounds {
		if r.isReady {
			out = append(out, r.name+"/ready")
		}
	}
	out = slices.DeleteFunc(out, func(k string) bool { return !strings.HasPrefix(k, prefix) })
	sort.Strings(out)
	return out
}

// Value returns the value of the key name (a lock's WithValue, a
// candidate's Campaign or Proclaim value), and whether the key exists.
func (st *Store) Value(name string) (string, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k, ok := st.keys[name]
	if !ok {
		return "", false
	}
	return k.value, true
}

// DeleteKey deletes the key name behind its owner's back, as another
// client of a real store could: a holder whose key it was is told Lost
// (and stays usable), a waiter fails with an error wrapping
// primitives.ErrLost, a barrier whose key it was is released. It reports
// whether the key existed and was deleted: a double barrier's name/ready,
// which Keys lists, is not deleted (false).
func (st *Store) DeleteKey(name string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if b, ok := st.barriers[name]; ok && b.held {
		st.lowerBarrier(b)
		return true
	}
	k, ok := st.keys[name]
	if !ok {
		return false
	}
	if k.party != nil {
		k.party.keyDeleted()
		return true
	}
	svc := k.svc
	switch {
	case k.held:
		svc.Lose(svc.KeyDeleted(k.name), metrics.CauseKeyDeleted)
	default:
		k.reply.Answer(driver.Hold{}, fmt.Errorf("%s: waiting key %s deleted by another client: %w", svc.Spec().Name, k.name, errLost))
	}
	st.remove(k)
	return true
}

// key is one key of the store: a holder's or waiter's place in a queue, or
// a double barrier party's.
type key struct {
	name    string
	q       *queue
	created int64
	svc     *service
	mode    rwlock.Mode
	value   string
	start   time.Time
	reply   actor.Reply[driver.Hold] // while waiting
	held    bool
	waited  bool // it did not hold when it was written
	token   int64
	slot    int          // a semaphore holder's slot
	party   *doubleParty // a double barrier party's key
}

// queue is the keys of one primitive's name, in creation order.
type queue struct {
	kind, name string
	keys       []*key
	// Read/write locks: the current epoch (the revision of the grant that
	// began it) and whether it is a read epoch.
	epoch     int64
	epochRead bool
	// Semaphores: its permits and which key holds each slot.
	permits int
	slots   map[int]*key
	// Elections: the leader last announced, and every service following.
	leader    election.Leadership
	followers map[*service]struct{}
}

// queueOf returns the queue of kind on name, made if needed. Locked.
func (st *Store) queueOf(kind, name string) *queue {
	id := kind + "\x00" + name
	q, ok := st.queues[id]
	if !ok {
		q = &queue{kind: kind, name: name, slots: map[int]*key{}, followers: map[*service]struct{}{}}
		st.queues[id] = q
	}
	return q
}

// write raises the store's revision and returns it. Locked.
func (st *Store) write() int64 {
	st.rev++
	return st.rev
}

// add creates a key of svc in its queue, waiting. Locked.
func (st *Store) add(svc *service, mode rwlock.Mode, value string, r actor.Reply[driver.Hold], start time.Time) *key {
	rev := st.write()
	sub := ""
	if svc.kind == kindRWLock {
		sub = map[rwlock.Mode]string{rwlock.Read: "read/", rwlock.Write: "write/"}[mode]
	}
	k := &key{name: svc.name + "/" + sub + strconv.FormatInt(svc.s.id, 10) + "-" + strconv.FormatInt(rev, 10), q: svc.q, created: rev, svc: svc,
		mode: mode, value: value, start: start, reply: r, slot: -1}
	st.keys[k.name] = k
	svc.q.keys = append(svc.q.keys, k)
	svc.s.keys[k] = struct{}{}
	return k
}

// remove deletes k and lets its queue move on. Locked.
func (st *Store) remove(k *key) {
	if st.keys[k.name] != k {
		return
	}
	if k.party != nil {
		st.leaveRound(k.party)
		return
	}
	st.write()
	delete(st.keys, k.name)
	delete(k.svc.s.keys, k)
	q := k.q
	if q == nil {
		return
	}
	for i, x := range q.keys {
		if x == k {
			q.keys = append(q.keys[:i], q.keys[i+1:]...)
			break
		}
	}
	if k.slot >= 0 && q.slots[k.slot] == k {
		delete(q.slots, k.slot)
	}
	st.settle(q)
}

// holds reports whether k, of q, holds by q's rule: the first key of a lock
// or election; a writer with nobody before it, a reader with no writer
// before it; the first permits keys of a semaphore. Locked.
func (q *queue) holds(i int) bool {
	k := q.keys[i]
	switch q.kind {
	case kindRWLock:
		if k.mode == rwlock.Write {
			return i == 0
		}
		for _, x := range q.keys[:i] {
			if x.mode == rwlock.Write {
				return false
			}
		}
		return true
	case kindSemaphore:
		return i < q.permits
	default:
		return i == 0
	}
}

// settle grants every waiting key of q that holds now, with its token, and
// announces a new leader. A grant whose caller gave up is undone and its
// key deleted. Locked.
func (st *Store) settle(q *queue) {
	for i, k := range q.keys {
		// A key of a session that is ending waits for its removal:
		// nothing is granted on a session that is gone.
		if k.held || k.svc.s.err != nil || !q.holds(i) {
			continue
		}
		k.held = true
		k.token = st.tokenFor(q, k)
		h := driver.Hold{Key: k.name, Created: k.created, Token: fencing.Token(k.token), Mode: k.mode,
			Value: k.value, Slot: k.slot, LeaseID: k.svc.s.id, Waited: k.waited}
		if !k.svc.Grant(h, k.start, func(h driver.Hold) bool { return k.reply.Answer(h, nil) }) {
			k.held = false
			st.remove(k) // settles q again
			return
		}
		k.reply = actor.Reply[driver.Hold]{}
	}
	if q.kind == kindElection {
		st.announce(q)
	}
}

// tokenFor issues the token of k, which holds now. Locked.
func (st *Store) tokenFor(q *queue, k *key) int64 {
	switch q.kind {
	case kindElection:
		return k.created
	case kindRWLock:
		if k.mode == rwlock.Read && q.epochRead {
			return q.epoch
		}
		q.epoch, q.epochRead = st.write(), k.mode == rwlock.Read
		return q.epoch
	case kindSemaphore:
		for slot := 0; ; slot++ {
			if _, taken := q.slots[slot]; !taken {
				k.slot = slot
				q.slots[slot] = k
				return st.write()
			}
		}
	default:
		return st.write()
	}
}

// announce tells q's elections who leads now, if that changed. A first
// key that does not hold is of a session that is ending, on its way out:
// it never leads, and the leader is announced once it is gone. Locked.
func (st *Store) announce(q *queue) {
	var now election.Leadership
	if len(q.keys) > 0 {
		k := q.keys[0]
		if !k.held {
			return
		}
		now = election.Leadership{Key: k.name, Value: k.value, FencingToken: fencing.Token(k.created),
			LeaseID: k.svc.s.id, Created: k.created}
	}
	if now == q.leader {
		return
	}
	q.leader = now
	for svc := range q.followers {
		svc.leaderChanged(now)
	}
}
