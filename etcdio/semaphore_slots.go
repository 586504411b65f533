package etcdio

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ahrtr/disco/primitives"
)

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
