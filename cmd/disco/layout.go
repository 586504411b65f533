package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/ahrtr/disco/etcdio"
)

// Kinds of primitive a prefix can hold.
const (
	kindLock     = "lock"
	kindRWLock   = "rwlock"
	kindElection = "election"
)

// queueEntry is one key in a primitive's queue, in creation order.
type queueEntry struct {
	Position int    `json:"position"` // 1 = first in line
	Role     string `json:"role"`     // holder, waiter (locks, rwlocks); leader, candidate (elections)
	Mode     string `json:"mode,omitempty"`
	Key      string `json:"key"`
	Value    string `json:"value,omitempty"`
	// CreatedRevision is the key's creation revision: it names the hold
	// (Created in disco's API). A lock's fencing token is the revision at
	// which it was acquired, not stored in etcd; a leader's token is its
	// CreatedRevision.
	CreatedRevision int64 `json:"created_revision"`
	// Token is set for a leader only, whose token is stored: its key's
	// creation revision.
	Token int64  `json:"token,omitempty"`
	Lease string `json:"lease,omitempty"` // hex, as etcdctl prints it
	// LeaseTTL is the lease's remaining time to live in seconds (-1: gone),
	// LeaseGrantedTTL its TTL when granted.
	LeaseTTL        *int64 `json:"lease_ttl_seconds,omitempty"`
	LeaseGrantedTTL int64  `json:"lease_granted_ttl_seconds,omitempty"`
	leaseID         int64
}

// epochInfo is a rwlock's epoch key: its last advance names the newest
// token issued.
type epochInfo struct {
	Key   string `json:"key"`
	Value string `json:"value"` // read or write: who advanced it last
	// Revision is its ModRevision: the token of the last holder that
	// advanced it (readers share theirs).
	Revision int64 `json:"revision"`
}

// report is what 'disco status' shows about one prefix.
type report struct {
	Service  string       `json:"service"` // etcd, ZooKeeper, Redis
	Name     string       `json:"name"`
	Kind     string       `json:"kind"`      // lock, rwlock, election; "" if no keys
	KindFrom string       `json:"kind_from"` // layout, flag
	Revision int64        `json:"revision"`  // the store's revision of the read
	Queue    []queueEntry `json:"queue"`
	Epoch    *epochInfo   `json:"epoch,omitempty"`
	Nested   []nestedName `json:"nested,omitempty"`
}

// nestedName is a name nested under the one status shows (NAME/sub): its
// keys fall inside NAME's range but are not NAME's.
type nestedName struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // from its key layout, as detectKind tells
	Keys int    `json:"keys"` // how many of its keys (its epoch key too)
}

// splitNested sorts the keys under name+"/" into name's own and those of
// the names nested under it, in order of name. Name's own keys are the
// keys of its layout: name/K for a lock or an election, name/read/K and
// name/write/K for a rwlock, K without a further "/". Any other key belongs
// to a nested name: the key without its last segment, or without its last
// two if the one before last is read or write (a nested rwlock); a key
// ending in EpochSuffix is the epoch key of the nested rwlock it names. (A
// lock named name/read or name/write can therefore not be told from the
// readers and writers of a rwlock on name: those last segments are
// reserved.)
func splitNested(name string, kvs []*mvccpb.KeyValue) (own []*mvccpb.KeyValue, nested []nestedName) {
	type sub struct {
		kvs   []*mvccpb.KeyValue
		epoch *mvccpb.KeyValue
	}
	subs := map[string]*sub{}
	at := func(n string) *sub {
		if subs[n] == nil {
			subs[n] = &sub{}
		}
		return subs[n]
	}
	for _, kv := range kvs {
		key := string(kv.Key)
		rest := strings.TrimPrefix(key, keyPrefix(name))
		if n, ok := strings.CutSuffix(key, etcdio.EpochSuffix); ok {
			at(n).epoch = kv
			continue
		}
		if ownKey(rest) {
			own = append(own, kv)
			continue
		}
		dir := key[:strings.LastIndexByte(key, '/')]
		if last := dir[strings.LastIndexByte(dir, '/')+1:]; last == "read" || last == "write" {
			if up := dir[:strings.LastIndexByte(dir, '/')]; len(up) > len(name) {
				dir = up
			}
		}
		s := at(dir)
		s.kvs = append(s.kvs, kv)
	}
	for n, s := range subs {
		keys := len(s.kvs)
		if s.epoch != nil {
			keys++
		}
		nested = append(nested, nestedName{Name: n, Kind: detectKind(n, s.kvs, s.epoch), Keys: keys})
	}
	slices.SortFunc(nested, func(a, b nestedName) int { return strings.Compare(a.Name, b.Name) })
	return own, nested
}

// ownKey says whether rest, a key without name+"/", is of name's own
// layout: K, read/K or write/K, K without "/".
func ownKey(rest string) bool {
	if r, ok := strings.CutPrefix(rest, "read/"); ok {
		rest = r
	} else if r, ok := strings.CutPrefix(rest, "write/"); ok {
		rest = r
	}
	return rest != "" && !strings.Contains(rest, "/")
}

// detectKind tells from the keys under name+"/" and the epoch key what
// primitive uses name: rwlock keys sit under read/ and write/ beside an
// epoch key; a disco lock's keys are tagged (<lease>-lock-...); other keys
// holding values are an election's candidates; empty untagged keys are a
// lock's (an older disco's, concurrency.Mutex's, etcdctl lock's). Nothing
// there gives "".
func detectKind(name string, kvs []*mvccpb.KeyValue, epoch *mvccpb.KeyValue) string {
	if epoch != nil {
		return kindRWLock
	}
	kind := ""
	for _, kv := range kvs {
		rest := strings.TrimPrefix(string(kv.Key), name+"/")
		if strings.HasPrefix(rest, "read/") || strings.HasPrefix(rest, "write/") {
			return kindRWLock
		}
		switch {
		case lockKey(rest):
			return kindLock
		case len(kv.Value) > 0:
			kind = kindElection
		case kind == "":
			kind = kindLock
		}
	}
	return kind
}

// lockKey says whether rest, a key without its name's prefix, is named as
// disco's lock keys are: <lease>-lock-<n>.<m>.
func lockKey(rest string) bool {
	_, id, ok := strings.Cut(rest, "-")
	return ok && strings.HasPrefix(id, etcdio.LockKeyTag)
}

// checkKind validates a --kind value ("" means detect).
func checkKind(kind string) error {
	switch kind {
	case "", kindLock, kindRWLock, kindElection:
		return nil
	}
	return fmt.Errorf("--kind %q: want lock, rwlock or election", kind)
}

// classify orders the keys under name+"/" by creation and gives each its
// role under kind, as disco (and etcd's recipes) decide who holds:
// a lock's or an election's first key holds or leads; a rwlock's writer
// holds when no key was created before it, a reader when no writer was.
func classify(name, kind string, kvs []*mvccpb.KeyValue) []queueEntry {
	kvs = slices.Clone(kvs)
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmpInt(a.CreateRevision, b.CreateRevision) })
	entries := make([]queueEntry, 0, len(kvs))
	writerAhead := false
	for i, kv := range kvs {
		e := queueEntry{Position: i + 1, Key: string(kv.Key), CreatedRevision: kv.CreateRevision, leaseID: kv.Lease}
		if kv.Lease != 0 {
			e.Lease = leaseHex(kv.Lease)
		}
		switch kind {
		case kindElection:
			e.Value = string(kv.Value)
			e.Role = "candidate"
			if i == 0 {
				e.Role, e.Token = "leader", kv.CreateRevision
			}
		case kindRWLock:
			e.Mode = "write"
			if strings.HasPrefix(e.Key, name+"/read/") {
				e.Mode = "read"
			}
			e.Role = "waiter"
			if (e.Mode == "write" && i == 0) || (e.Mode == "read" && !writerAhead) {
				e.Role = "holder"
			}
			if e.Mode == "write" {
				writerAhead = true
			}
		default:
			e.Value = string(kv.Value)
			e.Role = "waiter"
			if i == 0 {
				e.Role = "holder"
			}
		}
		entries = append(entries, e)
	}
	return entries
}

// epochOf describes a rwlock's epoch key, or nil.
func epochOf(kv *mvccpb.KeyValue) *epochInfo {
	if kv == nil {
		return nil
	}
	return &epochInfo{Key: string(kv.Key), Value: string(kv.Value), Revision: kv.ModRevision}
}

// epochKey is the epoch key a rwlock on name keeps beside its keys.
func epochKey(name string) string { return name + etcdio.EpochSuffix }

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// leaseHex formats a lease ID as etcdctl does.
func leaseHex(id int64) string { return strconv.FormatInt(id, 16) }
