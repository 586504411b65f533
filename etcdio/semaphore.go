package etcdio

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/actor"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// semService is semaphore.Service on a session. Its keys, for a semaphore
// named prefix with N permits:
//
//   - prefix + PermitsSuffix: N, in decimal. Written once, by the first user
//     of the name, with no lease; every acquisition's transaction checks it,
//     so a user that disagrees on N never writes a key. RetireSemaphore
//     removes it.
//   - prefix/q/...: the queue. Each acquisition writes a fresh key on its
//     session's lease; it holds a permit once fewer than N keys created
//     before its own are left, so at most N hold, served in order.
//   - prefix/slot/<i>: who owns slot i, 0 <= i < N: a holder's key name and
//     CreateRevision, on the holder's lease. A holder claims the lowest slot
//     whose key is absent or names a queue key that no longer exists, with a
//     compare-and-swap on the slot key's ModRevision, so no slot is ever
//     owned by two holders at once. Its fencing token is the revision of
//     that claim: strictly increasing per name, and so per slot.
//
// A release deletes the queue key and, in the same transaction, the slot key
// if the claim is still the holder's. A holder that loses its queue key
// (deleted by someone else) leaves a slot key naming a key that is gone: the
// next claimant takes the slot over, with a higher token that a guard of the
// slot's scope then prefers. A lost lease takes both keys.
//
// An uncontended Acquire is two writes: the queue key (with a read of the
// queue and the slots in the same transaction) and the slot's claim. A
// waiter watches the queue's deletions and counts down the keys ahead of it;
// only the waiter whose turn it is reads, then claims. Every waiter receives
// every release's watch event, which is fine for the tens of owners a
// semaphore has, not for thousands.
type semService struct {
	*service
	*semState
}

// semState is what one semaphore service knows beyond its service.
type semState struct {
	n        int
	nameArg  string // the name as its user passed it
	cfgKey   string // prefix + PermitsSuffix
	queueDir string // prefix/q/
	slotDir  string // prefix/slot/

	mu   sync.Mutex
	held claimed // the slot of the service's latest claim
	snap snapshot
}

// snapshot is one read of the queue and the slot keys, made while the key
// created at created exists: where a claim starts.
type snapshot struct {
	created     int64
	queue, slot []*mvccpb.KeyValue
	// Without a read: the slot a release freed as the key's turn came
	// (hinted), whose slot key the release deleted.
	hinted bool
	hint   int
}

// readOp reads a snapshot: every key under the prefix, the queue's (whose
// values are empty) and the slots'.
func (st *semState) readOp() clientv3.Op {
	return clientv3.OpGet(st.nameArg+"/", clientv3.WithPrefix())
}

func (st *semState) snapshotOf(created int64, r *etcdserverpb.ResponseOp) snapshot {
	sn := snapshot{created: created}
	for _, kv := range r.GetResponseRange().Kvs {
		switch {
		case strings.HasPrefix(string(kv.Key), st.queueDir):
			sn.queue = append(sn.queue, kv)
		case strings.HasPrefix(string(kv.Key), st.slotDir):
			sn.slot = append(sn.slot, kv)
		}
	}
	return sn
}

// keep stores sn for the claim of its key.
func (st *semState) keep(sn snapshot) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.snap = sn
}

// take returns the stored snapshot for the key created at created, if any,
// and forgets it.
func (st *semState) take(created int64) (snapshot, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	sn := st.snap
	st.snap = snapshot{}
	return sn, sn.created == created && created != 0
}

// ahead counts the keys of sn's queue created before created.
func ahead(queue []*mvccpb.KeyValue, created int64) int {
	n := 0
	for _, kv := range queue {
		if kv.CreateRevision < created {
			n++
		}
	}
	return n
}

// claimed is a slot claimed by the key created at created.
type claimed struct {
	created int64
	slot    int
}

// PermitsSuffix is appended to a semaphore's prefix to name the key that
// stores its number of permits.
const PermitsSuffix = ".permits"

// maxPermits bounds N: a semaphore's holders each read every slot key.
const maxPermits = 1 << 12

// NewSemaphore returns a semaphore on prefix with n permits (1 <= n <=
// 4096). The first user of a prefix records n beside it (prefix +
// PermitsSuffix); a later user with another n gets an error wrapping
// semaphore.ErrPermitMismatch, and nothing of its own is left in etcd.
// Without WithSession it runs its own session, closed by its Close.
func NewSemaphore(cli *clientv3.Client, prefix string, n int, opts ...Option) (semaphore.Service, error) {
	fail := func(err error) error { return fmt.Errorf("etcdio: new semaphore %s: %w", quote(prefix), err) }
	o, err := buildOptions(opts)
	if err != nil {
		return nil, fail(err)
	}
	if err := checkPrefix(prefix); err != nil {
		return nil, fail(err)
	}
	if err := checkClient(cli); err != nil {
		return nil, fail(err)
	}
	if n < 1 || n > maxPermits {
		return nil, fail(fmt.Errorf("%d permits, want 1 to %d: %w", n, maxPermits, ErrInvalidArgument))
	}
	st := &semState{n: n, nameArg: prefix, cfgKey: prefix + PermitsSuffix, queueDir: prefix + "/q/", slotDir: prefix + "/slot/"}
	created, err := st.agree(o.ctx, cli)
	if err != nil {
		return nil, fail(err)
	}
	sp := &spec{kind: "semaphore", errTaken: semaphore.ErrNoPermit, errNotHeld: semaphore.ErrNotHeld,
		ownQueues: []string{"q/"}, token: st.claim}
	svc, err := newService(sp, cli, prefix, opts)
	if err != nil {
		if created {
			// Undo the record of n, unless someone uses the name meanwhile.
			_ = retireSemaphore(o.ctx, cli, prefix)
		}
		return nil, err
	}
	return semService{svc, st}, nil
}

// agree records n for the name if nobody has, and checks it otherwise. It
// reports whether it wrote the record.
func (st *semState) agree(ctx context.Context, cli *clientv3.Client) (bool, error) {
	want := strconv.Itoa(st.n)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(st.cfgKey), "=", 0)).
		Then(clientv3.OpPut(st.cfgKey, want)).Else(clientv3.OpGet(st.cfgKey)).Commit()
	if err != nil {
		return false, fmt.Errorf("record %d permits: %w", st.n, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	var have string
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		have = string(kvs[0].Value)
	}
	if have != want {
		return false, fmt.Errorf("%s says %q permits, this user %d: %w", st.cfgKey, have, st.n, semaphore.ErrPermitMismatch)
	}
	return false, nil
}

func (m semService) Acquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.acquireSem(ctx, false))
}

func (m semService) TryAcquire(ctx context.Context) (semaphore.Grant, error) {
	return m.grant(m.acquireSem(ctx, true))
}

// acquireSem makes this owner hold a permit, or fails leaving no key.
func (m semService) acquireSem(ctx context.Context, try bool) (grant, error) {
	if err := m.enter(ctx, try); err != nil {
		return grant{}, err
	}
	g, err := m.enqueueSem(ctx, try)
	if err != nil {
		m.leave() // a recorded grant's end frees sem, on the loop
	}
	return g, err
}

// enqueueSem writes the owner's queue key, if the name's record of N agrees,
// reading the queue and the slots in the same transaction, and waits for the
// grant. The read runs before the put: every key it finds is ahead.
func (m semService) enqueueSem(ctx context.Context, try bool) (grant, error) {
	agrees := clientv3.Compare(clientv3.Value(m.cfgKey), "=", strconv.Itoa(m.n))
	w, resp, err := m.create(ctx, m.queueDir, "", []clientv3.Cmp{agrees}, m.readOp())
	if err != nil {
		return grant{}, err
	}
	if resp == nil {
		return grant{}, fmt.Errorf("%s: %s no longer says %d permits (changed or retired): %w",
			m.name, m.cfgKey, m.n, semaphore.ErrPermitMismatch)
	}
	sn := m.snapshotOf(w.created, resp.Responses[0])
	count := len(sn.queue)
	if try && count >= m.n {
		_ = m.s.deleteKey(w.key, w.created)
		return grant{}, fmt.Errorf("%s: %d owners hold or wait for %d permits: %w", m.name, count, m.n, semaphore.ErrNoPermit)
	}
	if count < m.n {
		// The read ran before the put: add the key the put wrote.
		sn.queue = append(sn.queue, &mvccpb.KeyValue{Key: []byte(w.key), CreateRevision: w.created})
		m.keep(sn)
	}
	w.blockers = m.queueDir
	return m.park(ctx, w, func(r actor.Reply[grant]) { m.semEnqueued(w, count, r) })
}

// semEnqueued parks the caller of a new queue key, with count keys ahead of
// it, until it holds. Loop only.
func (m semService) semEnqueued(w *waiter, count int, r actor.Reply[grant]) {
	svc := m.service
	switch {
	case svc.ended:
		r.Answer(grant{}, svc.Err())
		return
	case svc.gone(w.key, w.created):
		r.Answer(grant{}, fmt.Errorf("%s: key %s deleted before it was granted: %w", svc.name, w.key, primitives.ErrLost))
		return
	}
	w.reply = r
	w.waited = count >= m.n
	svc.waiter = w
	if !w.waited {
		svc.holds(w, w.created) // the spec's token claims a slot
		return
	}
	m.watchQueue(w)
}

// watchQueue has a session helper watch the queue's deletions (with the
// deleted keys' CreateRevision) and count down the keys ahead of w from a
// read made once the watch is in place; when fewer than N are left, it
// reads again, which confirms w's key exists and starts its claim. So a
// release costs the waiters a watch event each and one read, by the waiter
// whose turn it is. Loop only.
func (m semService) watchQueue(w *waiter) {
	svc := m.service
	ctx, cancel := context.WithCancel(svc.s.ctx)
	w.stopWatch = cancel
	// The helper's own state: keys ahead as of the revision read, and
	// whether w's turn was posted.
	left, read, posted := 0, int64(0), false
	turn := func(sn snapshot, rev int64) {
		posted = true
		m.keep(sn)
		svc.s.post(func() { m.semLooked(w, rev, nil) })
	}
	look := func(rctx context.Context) error {
		sn, rev, err := m.semLook(rctx, w)
		switch {
		case err != nil && !lostErr(err):
			return err // transient: follow reopens the watch and looks again
		case err != nil:
			svc.s.post(func() { m.semLooked(w, rev, err) })
			return nil
		}
		left, read = ahead(sn.queue, w.created), rev
		if left < m.n {
			turn(sn, rev)
		}
		return nil
	}
	changed := func(rctx context.Context, evs []*clientv3.Event) error {
		for _, ev := range evs {
			switch {
			case posted:
				return nil
			case ev.Type != clientv3.EventTypeDelete || ev.Kv.ModRevision <= read:
			case ev.PrevKv == nil:
				return look(rctx) // compacted away: count afresh
			case ev.PrevKv.CreateRevision < w.created:
				if left--; left >= m.n {
					continue
				}
				// w's turn. A holder's key names its slot: a release
				// freed that one, unless the key was lost or still claiming.
				if slot, err := strconv.Atoi(string(ev.PrevKv.Value)); err == nil && slot >= 0 && slot < m.n {
					turn(snapshot{created: w.created, hinted: true, hint: slot}, ev.Kv.ModRevision)
					return nil
				}
				return look(rctx)
			}
		}
		return nil
	}
	svc.s.goHelper(func(context.Context) {
		svc.s.follow(ctx, follower{key: m.queueDir,
			opts:   []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithPrevKV()},
			synced: look, changed: changed,
		})
	})
}

// semLook reads the queue and the slots, and the revision of the read, in a
// transaction that also confirms w's key still exists. Helper goroutine
// only.
func (m semService) semLook(ctx context.Context, w *waiter) (snapshot, int64, error) {
	mine := clientv3.Compare(clientv3.CreateRevision(w.key), "=", w.created)
	resp, err := m.s.cli.Txn(ctx).If(mine).Then(m.readOp()).Commit()
	if err != nil {
		return snapshot{}, 0, err
	}
	if !resp.Succeeded {
		return snapshot{}, 0, fmt.Errorf("%s: waiting key %s deleted by another client: %w", m.name, w.key, primitives.ErrLost)
	}
	return m.snapshotOf(w.created, resp.Responses[0]), resp.Header.Revision, nil
}

// semLooked settles a look that found w free to hold, or its key gone. Loop
// only.
func (m semService) semLooked(w *waiter, rev int64, err error) {
	svc := m.service
	if svc.waiter != w || w.stopWatch == nil {
		return // the waiter is gone, or already claiming its slot
	}
	if err != nil {
		svc.stopWaiter(err)
		return
	}
	svc.holds(w, rev)
}

// claim takes the lowest free slot for g, whose key holds a permit, and
// returns the revision of the claim: g's fencing token. The claim also
// writes the slot's number into g's key (its CreateRevision, and so its
// place in the queue, stays), so that the release's watch event tells the
// next waiter which slot it freed. It starts from what the turn's watch or
// read found, if kept, and after a lost race from the read that the failed
// claim made in its place. It runs on a session helper before the grant is
// recorded (the spec's token).
func (st *semState) claim(ctx context.Context, svc *service, g grant) (int64, error) {
	cli := svc.s.cli
	mine := clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.created)
	owner := g.key + "@" + strconv.FormatInt(g.created, 10)
	sn, kept := st.take(g.created)
	if !kept {
		resp, err := cli.Txn(ctx).If(mine).Then(st.readOp()).Commit()
		if err != nil {
			return 0, err
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("key %s is gone: %w", g.key, primitives.ErrLost)
		}
		sn = st.snapshotOf(g.created, resp.Responses[0])
	}
	for {
		slot, rev := sn.hint, int64(0) // a hinted slot's key was deleted
		if !sn.hinted {
			if !sn.has(g.key, g.created) {
				return 0, fmt.Errorf("key %s is gone: %w", g.key, primitives.ErrLost)
			}
			var ok bool
			if slot, rev, ok = st.free(sn.slot, sn.queue); !ok {
				return 0, fmt.Errorf("all %d slots are owned by live keys, though key %s holds a permit: keys under %s were written by something else",
					st.n, g.key, quote(st.nameArg))
			}
		}
		key := st.slotDir + strconv.Itoa(slot)
		resp, err := cli.Txn(ctx).If(mine, clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, owner, clientv3.WithLease(svc.s.lease)),
				clientv3.OpPut(g.key, strconv.Itoa(slot), clientv3.WithIgnoreLease())).
			Else(st.readOp()).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			st.setHeld(claimed{created: g.created, slot: slot})
			return resp.Header.Revision, nil
		}
		// Another holder took the slot first, or g's key is gone.
		sn = st.snapshotOf(g.created, resp.Responses[0])
	}
}

// has reports whether sn's queue holds key, created at created.
func (sn snapshot) has(key string, created int64) bool {
	for _, kv := range sn.queue {
		if string(kv.Key) == key {
			return kv.CreateRevision == created
		}
	}
	return false
}

// free returns the lowest slot not owned by a live queue key, and the
// ModRevision of its slot key (0: absent).
func (st *semState) free(slots, queue []*mvccpb.KeyValue) (int, int64, bool) {
	live := make(map[string]int64, len(queue))
	for _, kv := range queue {
		live[string(kv.Key)] = kv.CreateRevision
	}
	taken := make([]bool, st.n)
	revs := make([]int64, st.n)
	for _, kv := range slots {
		i, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), st.slotDir))
		if err != nil || i < 0 || i >= st.n {
			continue
		}
		revs[i] = kv.ModRevision
		v := string(kv.Value)
		if at := strings.LastIndexByte(v, '@'); at >= 0 {
			created, err := strconv.ParseInt(v[at+1:], 10, 64)
			taken[i] = err == nil && live[v[:at]] == created
		}
	}
	for i := range taken {
		if !taken[i] {
			return i, revs[i], true
		}
	}
	return 0, 0, false
}

// setHeld records c unless a later key's claim is recorded already.
func (st *semState) setHeld(c claimed) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if c.created >= st.held.created {
		st.held = c
	}
}

// slotOf returns the slot claimed by the key created at created, or -1.
func (st *semState) slotOf(created int64) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	if created != 0 && st.held.created == created {
		return st.held.slot
	}
	return -1
}

func (m semService) grant(g grant, err error) (semaphore.Grant, error) {
	if err != nil {
		return semaphore.Grant{}, err
	}
	return semaphore.Grant{FencingToken: fencing.Token(g.token), Key: g.key, LeaseID: int64(m.s.lease), TTL: m.s.ttl,
		Name: m.nameArg, Slot: m.slotOf(g.created), Created: g.created}, nil
}

// Release deletes g's queue key and, in the same transaction, its slot key
// if the slot is still g's, only if the key is still g's, so a late retry
// never frees a newer hold.
func (m semService) Release(ctx context.Context, g semaphore.Grant) error {
	same := exactly(g.Created, g.Key, g.FencingToken)
	match := func(h grant) bool { return same(h) && m.slotOf(h.created) == g.Slot }
	cur, err := m.withGrant(ctx, match, func(g *grant) { g.releasing++ })
	if err != nil {
		return err
	}
	slotKey := m.slotDir + strconv.Itoa(g.Slot)
	freeSlot := clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(slotKey), "=", cur.token)},
		[]clientv3.Op{clientv3.OpDelete(slotKey)}, nil)
	resp, terr := m.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(cur.key), "=", cur.created)).
		Then(clientv3.OpDelete(cur.key), freeSlot).Commit()
	_, err = call(context.WithoutCancel(ctx), m.s, func(r actor.Reply[struct{}]) {
		r.Answer(struct{}{}, m.released(cur, resp, terr))
	})
	return err
}

// RetireSemaphore deletes the record of the number of permits of the
// semaphore on prefix (prefix + PermitsSuffix), the one key a semaphore
// leaves in etcd after every holder is gone. Call it when the name is retired
// for good, or to change its number of permits while nobody uses it. It
// fails with an error wrapping ErrInUse, deleting nothing, while a holder or
// waiter of the semaphore exists. It also deletes slot claims left by holders
// that are gone (a Close on a shared session leaves its claim, named after a
// key that no longer exists, until the session's lease ends).
func RetireSemaphore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	fail := func(err error) error { return fmt.Errorf("etcdio: retire semaphore %s: %w", quote(prefix), err) }
	if err := checkPrefix(prefix); err != nil {
		return fail(err)
	}
	if err := checkClient(cli); err != nil {
		return fail(err)
	}
	return retireSemaphore(ctx, cli, prefix)
}

func retireSemaphore(ctx context.Context, cli *clientv3.Client, prefix string) error {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(prefix+"/q/"), "=", 0).WithPrefix()).
		Then(clientv3.OpDelete(prefix+PermitsSuffix), clientv3.OpDelete(prefix+"/slot/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("etcdio: retire semaphore %s: %w", quote(prefix), err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("etcdio: retire semaphore %s: keys under it exist: %w", quote(prefix), ErrInUse)
	}
	return nil
}
