package zkio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/google/uuid"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// The znodes of a semaphore at path, as Curator's InterProcessSemaphoreV2
// lays them out: its internal mutex's queue at path/locks (an
// InterProcessMutex's), its leases at path/leases.
const (
	semLocks    = "/locks"
	semLeases   = "/leases"
	leaseMarker = "lease-"
	// slotPrefix begins a disco lease's data once it claims its slot.
	slotPrefix = "disco-slot-"
	// permitsPrefix begins path's data: the semaphore's number of permits.
	permitsPrefix = "disco-permits="
)

var semSpec = &spec{kind: "semaphore", markers: []string{leaseMarker}, notHeld: semaphore.ErrNotHeld, taken: semaphore.ErrNoPermit}

// semState is what a semaphore's service knows beyond its service.
type semState struct {
	n             int
	name          string // the name as its user passed it
	locks, leases string
}

// NewSemaphore returns an owner of the semaphore at path with n permits (1
// to semaphore.MaxPermits), in the layout and by the algorithm of Curator's
// InterProcessSemaphoreV2: an acquisition takes the semaphore's internal
// mutex (an InterProcessMutex at path/locks), creates its lease
// (path/leases/_c_<uuid>-lease-<seq>, ephemeral and sequential), waits
// until at most n leases exist, and then releases the mutex; a release
// deletes the lease. So disco and Curator
// owners on one path with one n never hold more than n permits together.
// TryAcquire waits for the mutex a second at most (tryMutexWait): behind
// an owner that holds it longer (stalled: its process paused, its
// connection frozen) it fails with an error wrapping ErrNoPermit, as it
// does at once when n owners hold or are acquiring ahead of it.
//
// Slots and tokens: under the mutex a disco holder claims the lowest slot no
// other disco lease names, by writing slotPrefix and the slot into its
// lease; its fencing token is the zxid of that write (strictly increasing
// per name: claims are made one at a time, under the mutex), Created the
// lease's czxid. A Curator holder claims no slot: it takes a permit, not a
// slot, so a mixed group's disco holders use at most n less the Curator
// holders' slots. n is kept in path's data (permitsPrefix and n), written
// by the first disco user; a disco user that disagrees gets
// ErrPermitMismatch at construction (Curator users do not check it).
//
// It connects to servers with a session of its own, which Close ends; or,
// with WithSession (and nil servers), it runs on that session.
func NewSemaphore(servers []string, path string, n int, opts ...Option) (semaphore.Service, error) {
	if n < 1 || n > semaphore.MaxPermits {
		return nil, fmt.Errorf("zkio: new semaphore: %d permits, want 1 to %d: %w", n, semaphore.MaxPermits, ErrInvalidArgument)
	}
	svc, err := newService(servers, path, semSpec, opts)
	if err != nil {
		return nil, err
	}
	svc.sem = &semState{n: n, name: path, locks: svc.path + semLocks, leases: svc.path + semLeases}
	o, _ := buildOptions(opts) // newService took them
	ctx, cancel := context.WithTimeout(o.Context, 10*time.Second)
	defer cancel()
	if err := svc.sem.agree(ctx, svc); err != nil {
		_ = svc.Close()
		return nil, fmt.Errorf("zkio: new semaphore %s: %w", svc.path, err)
	}
	return &zkSemaphore{svc}, nil
}

// agree writes n into path's data if no user did, and otherwise checks it.
func (m *semState) agree(ctx context.Context, svc *service) error {
	conn := svc.s.conn
	for {
		var data []byte
		var st *zk.Stat
		err := svc.request(ctx, func() (err error) {
			data, st, err = conn.Get(svc.path)
			return err
		}, nil)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			if err := svc.createParents(ctx, svc.path); err != nil {
				return err
			}
			continue
		case retryable(err):
			if !svc.pauseRetry(ctx) {
				return svc.cause(ctx)
			}
			continue
		case err != nil:
			return err
		case len(data) == 0:
			// A write left running when ctx ends writes this user's n,
			// as a write whose answer was lost would.
			version := st.Version
			err := svc.request(ctx, func() error {
				_, err := conn.Set(svc.path, []byte(permitsPrefix+strconv.Itoa(m.n)), version)
				return err
			}, nil)
			if err == nil || errors.Is(err, zk.ErrBadVersion) || retryable(err) {
				continue // look again: who wrote first says
			}
			return err
		}
		have, ok := strings.CutPrefix(string(data), permitsPrefix)
		if !ok {
			return fmt.Errorf("%s's data is not a disco semaphore's number of permits: %w", svc.path, ErrInvalidArgument)
		}
		if have != strconv.Itoa(m.n) {
			return fmt.Errorf("%s has %s permits, this user %d: %w", svc.path, have, m.n, semaphore.ErrPermitMismatch)
		}
		return nil
	}
}

// acquire takes the internal mutex, creates the lease and waits for room,
// claims a slot, and releases the mutex (see NewSemaphore). The mutex
// znode and the lease carry one uuid in their names, so that the owners of
// both are told apart from an owner of each. With try it fails with
// ErrNoPermit, at once, if n owners hold a lease or are acquiring ahead of
// it (in the mutex's queue; a disco owner that holds the mutex and has
// created its lease counts once, a Curator owner then twice), and, once it
// holds the mutex, if n leases exist then; with fewer, it waits its turn
// for the mutex, which an owner with room holds for a few requests, but
// tryMutexWait at most: an owner that holds it longer has stalled, and
// TryAcquire fails with ErrNoPermit (see takeMutex). On failure nothing
// it wrote is left.
func (m *semState) acquire(ctx context.Context, svc *service, try bool) (driver.Hold, error) {
	conn := svc.s.conn
	// list lists dir's children, giving up when ctx ends (see request).
	list := func(dir string) (kids []string, err error) {
		err = svc.request(ctx, func() (err error) {
			kids, _, err = conn.Children(dir)
			return err
		}, nil)
		return kids, err
	}
	if try {
		kids, err := list(m.leases)
		if errors.As(err, new(leftRunning)) {
			return driver.Hold{}, err
		}
		if err == nil && len(leasesOf(kids)) >= m.n {
			return driver.Hold{}, semaphore.ErrNoPermit
		}
	}
	guid := uuid.NewString()
	mutex, err := svc.createAs(ctx, m.locks, lockMarker, nil, guid)
	if err != nil {
		return driver.Hold{}, err
	}
	defer svc.withdraw(mutex) // the mutex is released whatever happens
	if try {
		// The queue first, then the leases: an owner between them (its
		// lease deleted, its next mutex created) is counted at most once.
		kids, err := list(m.locks)
		var lkids []string
		if err == nil {
			lkids, err = list(m.leases)
			if errors.Is(err, zk.ErrNoNode) {
				lkids, err = nil, nil // no lease yet
			}
			if err == nil && owners(leasesOf(lkids), kids, mutex) >= m.n {
				return driver.Hold{}, semaphore.ErrNoPermit
			}
		}
		if errors.As(err, new(leftRunning)) {
			return driver.Hold{}, err
		}
	}
	var waited bool
	o := &own{node: mutex, early: svc.stat(mutex, false)}
	if err := m.takeMutex(ctx, svc, o, try, &waited); err != nil {
		return driver.Hold{}, err
	}
	lease, err := svc.createAs(ctx, m.leases, leaseMarker, nil, guid)
	if err != nil {
		return driver.Hold{}, err
	}
	h, err := m.room(ctx, svc, lease, try, &waited)
	if err != nil {
		svc.withdraw(lease)
		return driver.Hold{}, err
	}
	h.Waited = waited
	return h, nil
}

// tryMutexWait bounds a TryAcquire's wait for the internal mutex: an owner
// with room holds it for a few requests (its lease's create, a listing,
// the reads of the other leases' slots and the write of its own), and one
// that holds it longer has stalled (its process paused, its connection
// frozen) for all TryAcquire can tell.
const tryMutexWait = time.Second

// takeMutex waits its turn for the internal mutex, its znode o's; with try,
// tryMutexWait at most: then it fails with an error wrapping ErrNoPermit.
// On failure the mutex znode is withdrawn.
func (m *semState) takeMutex(ctx context.Context, svc *service, o *own, try bool, waited *bool) error {
	if !try {
		return svc.waitTurn(ctx, m.locks, []string{lockMarker}, o, false, waited)
	}
	wctx, cancel := context.WithTimeout(ctx, tryMutexWait)
	defer cancel()
	err := svc.waitTurn(wctx, m.locks, []string{lockMarker}, o, false, waited)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil && svc.stopped() == nil {
		return fmt.Errorf("zkio: semaphore %s: the internal mutex not taken within %v, another owner holding it: %w",
			svc.path, tryMutexWait, semaphore.ErrNoPermit)
	}
	return err
}

// owners counts the owners that hold a lease of leases or are acquiring
// ahead of mutex in the mutex's queue (kids, the children of path/locks),
// each once: a mutex znode and a lease that carry one uuid are one owner's.
func owners(leases []member, kids []string, mutex string) int {
	seen := make(map[string]bool, len(leases))
	for _, l := range leases {
		seen[protectedUUID(l.name)] = true
	}
	n := len(leases)
	me, ok := memberOf(mutex[strings.LastIndexByte(mutex, '/')+1:], lockMarker)
	if !ok {
		return n
	}
	for _, k := range queueOf(kids, lockMarker) {
		if inQueueOrder(k, me) < 0 && !seen[protectedUUID(k.name)] {
			n++
		}
	}
	return n
}

// protectedUUID returns the uuid of a protected znode name
// (_c_<uuid>-...), or the whole name if it is not one.
func protectedUUID(name string) string {
	const n = len("00000000-0000-0000-0000-000000000000")
	if rest, ok := strings.CutPrefix(name, protectedPrefix); ok && len(rest) > n && rest[n] == '-' {
		return rest[:n]
	}
	return name
}

// room waits until at most n leases exist, its own among them, and then
// claims the slot.
func (m *semState) room(ctx context.Context, svc *service, lease string, try bool, waited *bool) (driver.Hold, error) {
	conn := svc.s.conn
	base := lease[len(m.leases)+1:]
	for {
		if err := svc.live(ctx); err != nil {
			return driver.Hold{}, err
		}
		var kids []string
		var ch <-chan zk.Event
		err := svc.request(ctx, func() (err error) {
			kids, _, ch, err = conn.ChildrenW(m.leases)
			return err
		}, nil)
		if err != nil {
			if retryable(err) && svc.pauseRetry(ctx) {
				continue
			}
			return driver.Hold{}, fmt.Errorf("zkio: list %s: %w", m.leases, errors.Join(err, svc.cause(ctx)))
		}
		q := leasesOf(kids)
		if !slices.ContainsFunc(q, func(x member) bool { return x.name == base }) {
			return driver.Hold{}, lostOwn(lease)
		}
		if len(q) <= m.n {
			return m.claim(ctx, svc, lease, q)
		}
		if try {
			return driver.Hold{}, semaphore.ErrNoPermit
		}
		*waited = true
		select {
		case <-ch:
			svc.metrics.Woken(svc.spec.kind, 1)
		case <-ctx.Done():
			return driver.Hold{}, ctx.Err()
		case <-svc.stop:
			return driver.Hold{}, svc.stopped()
		}
	}
}

// leasesOf returns the children of path/leases that are leases, in queue
// order: disco's and Curator's, named _c_<uuid>-lease-<seq>. Only they take
// permits: not a nested name's znode, nor one made there by hand.
func leasesOf(kids []string) []member {
	return slices.DeleteFunc(queueOf(kids, leaseMarker), func(x member) bool {
		return !strings.HasPrefix(x.name, protectedPrefix)
	})
}

// claim writes the lowest slot no other disco lease of q names into lease,
// and returns the hold: its token the zxid of that write.
func (m *semState) claim(ctx context.Context, svc *service, lease string, q []member) (driver.Hold, error) {
	conn := svc.s.conn
	taken := make([]bool, m.n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	// The reads, left running when ctx ends, set what is not read then.
	failed := svc.request(ctx, func() (readErr error) {
		for _, x := range q {
			p := m.leases + "/" + x.name
			if p == lease {
				continue
			}
			wg.Go(func() {
				data, _, err := conn.Get(p)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, zk.ErrNoNode):
				case err != nil:
					readErr = err
				default:
					if s, ok := strings.CutPrefix(string(data), slotPrefix); ok {
						if i, err := strconv.Atoi(s); err == nil && i >= 0 && i < m.n {
							taken[i] = true
						}
					}
				}
			})
		}
		wg.Wait()
		return readErr
	}, nil)
	if failed != nil {
		return driver.Hold{}, fmt.Errorf("zkio: read the leases of %s: %w", m.leases, errors.Join(failed, svc.cause(ctx)))
	}
	slot := slices.Index(taken, false) // one is free: at most n-1 others
	for {
		// A write left running when ctx ends is undone with the lease,
		// which the failed acquisition withdraws.
		var st *zk.Stat
		err := svc.request(ctx, func() (err error) {
			st, err = conn.Set(lease, []byte(slotPrefix+strconv.Itoa(slot)), -1)
			return err
		}, nil)
		switch {
		case err == nil:
			return driver.Hold{Key: lease, Created: st.Czxid, Token: fencing.Token(st.Mzxid), Slot: slot}, nil
		case errors.Is(err, zk.ErrNoNode):
			return driver.Hold{}, lostOwn(lease)
		case retryable(err) && svc.pauseRetry(ctx):
			continue
		}
		return driver.Hold{}, fmt.Errorf("zkio: claim slot %d with %s: %w", slot, lease, errors.Join(err, svc.cause(ctx)))
	}
}

// zkSemaphore is semaphore.Service on a service.
type zkSemaphore struct{ *service }

func (z *zkSemaphore) grant(h driver.Hold, err error) (semaphore.Grant, error) {
	if err != nil {
		return semaphore.Grant{}, err
	}
	return semaphore.Grant{FencingToken: h.Token, Key: h.Key, LeaseID: h.LeaseID, TTL: z.s.Timeout(),
		Name: z.sem.name, Slot: h.Slot, Created: h.Created}, nil
}

func (z *zkSemaphore) Acquire(ctx context.Context) (semaphore.Grant, error) {
	return z.grant(z.acquire(ctx, 0, "", false))
}

func (z *zkSemaphore) TryAcquire(ctx context.Context) (semaphore.Grant, error) {
	return z.grant(z.acquire(ctx, 0, "", true))
}

func (z *zkSemaphore) Release(ctx context.Context, g semaphore.Grant) error {
	at := driver.CreatedAt(g.Created)
	return z.release(ctx, func(h driver.Hold) bool { return at(h) && h.Slot == g.Slot })
}

// GrantScope makes the semaphore a primitives.GrantScoper, so that
// primitives.FollowGrants stamps each grant with the fencing scope of its
// slot ("<name>#<slot>", semaphore.Grant.Scope). ok is false once the grant
// a announced is no longer the semaphore's.
func (z *zkSemaphore) GrantScope(a primitives.Acquired) (string, bool) {
	h, ok := z.Current()
	if !ok || h.Created != a.Created {
		return "", false
	}
	return semaphore.Scope(z.sem.name, h.Slot), true
}
