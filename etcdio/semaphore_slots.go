package etcdio

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/driver"
	"github.com/ahrtr/disco/primitives/semaphore"
)

// snapshot is one read of the queue and the slot keys, made at revision rev
// while the key created at created exists: where a claim starts.
type snapshot struct {
	created, rev int64
	queue, slot  []*mvccpb.KeyValue
	// Without a read: the slot a release freed as the key's turn came
	// (hinted), whose slot key the release deleted.
	hinted bool
	hint   int
}

// readOp reads a snapshot: every key under the prefix, the queue's (whose
// values are empty) and the slots', with opts (a revision) added.
func (st *semState) readOp(opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpGet(st.nameArg+"/", append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...)
}

func (st *semState) snapshotOf(created, rev int64, r *etcdserverpb.ResponseOp) snapshot {
	sn := snapshot{created: created, rev: rev}
	for _, kv := range r.GetResponseRange().Kvs {
		switch {
		case st.queued(kv):
			sn.queue = append(sn.queue, kv)
		case strings.HasPrefix(string(kv.Key), st.queueDir):
			// Not an owner's: written by hand, or a nested name's.
		case strings.HasPrefix(string(kv.Key), st.slotDir):
			sn.slot = append(sn.slot, kv)
		}
	}
	return sn
}

// queued reports whether kv is an owner's key in the queue: directly in it
// and bound to a lease, as the lock's are (service.ours). A key written
// there by hand, or a key of a name nested in the queue, takes no permit.
func (st *semState) queued(kv *mvccpb.KeyValue) bool {
	rest, ok := strings.CutPrefix(string(kv.Key), st.queueDir)
	return ok && rest != "" && !strings.Contains(rest, "/") && kv.Lease != 0
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

// claim takes the lowest free slot for g, whose key holds a permit, and
// returns the revision of the claim: g's fencing token. The claim also
// writes the slot's number into g's key (its CreateRevision, and so its
// place in the queue, stays), so that the release's watch event tells the
// next waiter which slot it freed, and so that the slot stays taken while
// g's key exists, even if its claim is deleted. It starts from what the
// turn's watch or read found, if kept, and after a lost race from the read
// that the failed claim made in its place. When no slot is free (a holder
// that lost one of its keys has yet to delete the other, or a leftover
// claim, see noteLeftovers), it waits for a deletion under the prefix and
// reads again; a TryAcquire's claim fails with ErrNoPermit instead. It
// runs on a session helper before the grant is recorded (the spec's
// token).
func (st *semState) claim(ctx context.Context, svc *service, g driver.Hold) (int64, error) {
	if !st.begin(g.Created) {
		return 0, fmt.Errorf("key %s: the acquisition was given up: %w", g.Key, primitives.ErrLost)
	}
	cli := svc.s.cli
	mine := clientv3.Compare(clientv3.CreateRevision(g.Key), "=", g.Created)
	owner := g.Key + "@" + strconv.FormatInt(g.Created, 10)
	read := func() (snapshot, error) {
		resp, _, err := svc.s.txn(ctx, []clientv3.Cmp{mine}, []clientv3.Op{st.readOp()})
		if err != nil {
			return snapshot{}, err
		}
		if !resp.Succeeded {
			return snapshot{}, fmt.Errorf("key %s is gone: %w", g.Key, primitives.ErrLost)
		}
		return st.snapshotOf(g.Created, resp.Header.Revision, resp.Responses[0]), nil
	}
	sn, kept := st.take(g.Created)
	if !kept {
		var err error
		if sn, err = read(); err != nil {
			return 0, err
		}
	}
	try := st.isTry(g.Created)
	for {
		slot, rev := sn.hint, int64(0) // a hinted slot's key was deleted
		if !sn.hinted {
			kv := sn.find(g.Key)
			if kv == nil || kv.CreateRevision != g.Created {
				return 0, fmt.Errorf("key %s is gone: %w", g.Key, primitives.ErrLost)
			}
			if slot := st.slotNamed(kv); slot >= 0 {
				// An attempt of this claim that was given up landed: the
				// claim wrote the slot's number into g's key, at the
				// claim's revision.
				return st.claimed(svc, g, slot, kv.ModRevision), nil
			}
			var ok bool
			if slot, rev, ok = st.free(sn.slot, sn.queue, time.Now()); !ok {
				next := st.noteLeftovers(ctx, svc, sn)
				if try {
					return 0, fmt.Errorf("key %s: every slot is claimed (one naming a gone key is taken over once seen for a TTL): %w",
						g.Key, semaphore.ErrNoPermit)
				}
				if err := st.awaitDelete(ctx, cli, sn.rev, next); err != nil {
					return 0, err
				}
				var err error
				if sn, err = read(); err != nil {
					return 0, err
				}
				continue
			}
		}
		key := st.slotDir + strconv.Itoa(slot)
		resp, _, err := svc.s.txn(ctx, []clientv3.Cmp{mine, clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
			[]clientv3.Op{clientv3.OpPut(key, owner, clientv3.WithLease(svc.s.lease)),
				clientv3.OpPut(g.Key, strconv.Itoa(slot), clientv3.WithIgnoreLease())},
			st.readOp())
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return st.claimed(svc, g, slot, resp.Header.Revision), nil
		}
		// Another holder took the slot first, g's key is gone, or an
		// attempt given up landed: the snapshot tells.
		sn = st.snapshotOf(g.Created, resp.Header.Revision, resp.Responses[0])
	}
}

// claimed records g's claim of slot, made at revision tok, and returns tok.
func (st *semState) claimed(svc *service, g driver.Hold, slot int, tok int64) int64 {
	st.setHeld(claimed{created: g.Created, slot: slot})
	st.watchHold(svc, slotHold{key: g.Key, created: g.Created, slotKey: st.slotDir + strconv.Itoa(slot), token: tok})
	return tok
}

// A claim that names a queue key that no longer exists (a leftover) is
// taken over by a claimant with no other free slot once the claimant's
// service has seen it for a TTL of the claim's lease, at least its own
// session's (patience). A holder whose queue key was deleted deletes its
// claim as soon as it is told Lost (see watchHold), long before; a claim
// left after that is a leftover of an older disco, which left claims
// behind after a Close on a shared session or an Acquire given up
// mid-claim. Acquire waits for that moment (or the claim's deletion);
// TryAcquire does not wait: it fails with ErrNoPermit until then, and the
// service remembers since when it has seen each leftover, so a later
// TryAcquire takes it over.

// leftover is a claim: its slot key and ModRevision.
type leftover struct {
	key string
	rev int64
}

// noteLeftovers records when each leftover of sn (a claim naming a queue
// key not in sn) may be taken over, for those first seen now, and forgets
// leftovers no longer in sn. It returns when the next one may be taken
// over, and in a second if there is none.
func (st *semState) noteLeftovers(ctx context.Context, svc *service, sn snapshot) time.Time {
	now := time.Now()
	live := liveKeys(sn.queue)
	seen := make(map[leftover]time.Time)
	st.mu.Lock()
	known := st.leftovers
	st.mu.Unlock()
	next := now.Add(time.Second)
	for _, kv := range sn.slot {
		if _, ok := st.claimOwner(kv, live); ok {
			continue
		}
		id := leftover{string(kv.Key), kv.ModRevision}
		due, ok := known[id]
		if !ok {
			due = now.Add(st.patience(ctx, svc, kv))
		}
		seen[id] = due
		if due.Before(next) {
			next = due
		}
	}
	st.mu.Lock()
	st.leftovers = seen
	st.mu.Unlock()
	return next
}

// patience is how long a claimant waits before it takes over kv, a
// leftover: the TTL of its lease, at least the claimant's session's.
func (st *semState) patience(ctx context.Context, svc *service, kv *mvccpb.KeyValue) time.Duration {
	d := svc.s.ttl
	if kv.Lease == 0 {
		return d
	}
	rctx, done := svc.s.attempt(ctx)
	resp, err := svc.s.cli.TimeToLive(rctx, clientv3.LeaseID(kv.Lease))
	done(err)
	if err == nil {
		d = max(d, time.Duration(resp.GrantedTTL)*time.Second)
	}
	return d
}

// overdue reports whether kv, a leftover, may be taken over at now.
func (st *semState) overdue(kv *mvccpb.KeyValue, now time.Time) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	due, ok := st.leftovers[leftover{string(kv.Key), kv.ModRevision}]
	return ok && !now.Before(due)
}

// awaitDelete returns once a key under the prefix is deleted after revision
// rev, at the latest at until or a second after the watch opened (a watch on
// a member cut off from the client would stay silent), or with ctx's error.
func (st *semState) awaitDelete(ctx context.Context, cli *clientv3.Client, rev int64, until time.Time) error {
	wait := min(time.Until(until), time.Second)
	if wait <= 0 {
		return ctx.Err()
	}
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), wait)
	defer cancel()
	for wresp := range cli.Watch(wctx, st.nameArg+"/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(rev+1)) {
		if len(wresp.Events) > 0 || wresp.Err() != nil {
			break
		}
	}
	return ctx.Err()
}

// find returns sn's queue key named key, or nil.
func (sn snapshot) find(key string) *mvccpb.KeyValue {
	for _, kv := range sn.queue {
		if string(kv.Key) == key {
			return kv
		}
	}
	return nil
}

// free returns the lowest free slot and the ModRevision of its slot key (0:
// absent). A slot is taken while its slot key exists or a live queue key
// names it (a holder's key carries its slot's number), so exclusion
// survives the deletion of either key. A slot key that names a queue key
// that no longer exists (or names none) counts as free once it may be
// taken over at now (see noteLeftovers).
func (st *semState) free(slots, queue []*mvccpb.KeyValue, now time.Time) (int, int64, bool) {
	live := liveKeys(queue)
	taken := make([]bool, st.n)
	revs := make([]int64, st.n)
	for _, kv := range queue {
		if i := st.slotNamed(kv); i >= 0 {
			taken[i] = true
		}
	}
	for _, kv := range slots {
		i, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), st.slotDir))
		if err != nil || i < 0 || i >= st.n {
			continue
		}
		revs[i] = kv.ModRevision
		if _, ok := st.claimOwner(kv, live); ok || !st.overdue(kv, now) {
			taken[i] = true
		}
	}
	for i := range taken {
		if !taken[i] {
			return i, revs[i], true
		}
	}
	return 0, 0, false
}

// liveKeys maps the queue's keys to their CreateRevisions.
func liveKeys(queue []*mvccpb.KeyValue) map[string]int64 {
	live := make(map[string]int64, len(queue))
	for _, kv := range queue {
		live[string(kv.Key)] = kv.CreateRevision
	}
	return live
}

// claimOwner returns the queue key a slot key names, and whether that key
// is live.
func (st *semState) claimOwner(kv *mvccpb.KeyValue, live map[string]int64) (string, bool) {
	v := string(kv.Value)
	at := strings.LastIndexByte(v, '@')
	if at < 0 {
		return "", false
	}
	created, err := strconv.ParseInt(v[at+1:], 10, 64)
	return v[:at], err == nil && live[v[:at]] == created
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
