package main

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Markers of the znodes of zkio's primitives, in Curator's layouts:
// <path>/_c_<uuid>-<marker><sequence>.
var zkMarkers = []struct{ marker, kind, mode string }{
	{"lock-", kindLock, ""},
	{"latch-", kindElection, ""},
	{"__READ__", kindRWLock, "read"},
	{"__WRIT__", kindRWLock, "write"},
}

// silentZK drops the ZooKeeper client's log.
type silentZK struct{}

func (silentZK) Printf(string, ...any) {}

// newReport returns service's report of name without keys yet, as etcd's
// says it: an empty queue, the kind from the flag, else from the layout
// (none while there are no keys).
func newReport(service, name, kind string) *report {
	r := &report{Service: service, Name: name, Kind: kind, KindFrom: "flag", Queue: []queueEntry{}}
	if kind == "" {
		r.KindFrom = "layout"
	}
	return r
}

// status reads the znodes under NAME through a connection of its own.
func (b *zkBackend) status(ctx context.Context, name, kind string) (*report, error) {
	conn, _, err := zk.Connect(b.servers, b.g.dialTimeout, zk.WithLogger(silentZK{}))
	if err != nil {
		return nil, fmt.Errorf("status %s: %w", name, err)
	}
	defer conn.Close()
	type entry struct {
		node, kind, mode, seq string
		stat                  *zk.Stat
		data                  []byte
	}
	read := func() ([]entry, error) {
		children, _, err := conn.Children(name)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var es []entry
		for _, c := range children {
			for _, m := range zkMarkers {
				i := strings.LastIndex(c, m.marker)
				if i < 0 {
					continue
				}
				seq := c[i+len(m.marker):]
				if seq == "" || strings.Trim(seq, "0123456789") != "" {
					continue
				}
				data, st, err := conn.Get(path.Join(name, c))
				if errors.Is(err, zk.ErrNoNode) {
					break // it left meanwhile
				}
				if err != nil {
					return nil, err
				}
				es = append(es, entry{node: path.Join(name, c), kind: m.kind, mode: m.mode, seq: seq, stat: st, data: data})
				break
			}
		}
		sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
		return es, nil
	}
	began := time.Now()
	cctx, cancel := b.g.commandCtx(ctx)
	defer cancel()
	type answer struct {
		es  []entry
		err error
	}
	ch := make(chan answer, 1)
	go func() { es, err := read(); ch <- answer{es, err} }()
	var a answer
	select {
	case a = <-ch:
	case <-cctx.Done():
		a.err = b.g.requestFailed(cctx, "ZooKeeper", b.servers, began, cctx.Err())
	}
	if a.err != nil {
		return nil, fmt.Errorf("status %s: %w", name, a.err)
	}
	r := newReport("ZooKeeper", name, kind)
	if kind == "" && len(a.es) > 0 {
		r.Kind = a.es[0].kind
	}
	writerAhead := false
	for _, e := range a.es {
		if r.KindFrom == "layout" && e.kind != r.Kind {
			continue // another kind's znode under NAME: not this layout's
		}
		if r.Kind == kindRWLock && e.mode == "" {
			e.mode = "write" // read as etcd's status reads a key not a reader's
		}
		q := queueEntry{Position: len(r.Queue) + 1, Key: e.node, CreatedRevision: e.stat.Czxid,
			Lease: leaseHex(e.stat.EphemeralOwner), Mode: e.mode}
		switch r.Kind {
		case kindElection:
			q.Role, q.Value = "candidate", string(e.data)
			if len(r.Queue) == 0 {
				q.Role, q.Token = "leader", e.stat.Czxid
			}
		case kindRWLock:
			q.Role = "waiter"
			if e.mode == "read" && !writerAhead || e.mode == "write" && len(r.Queue) == 0 {
				q.Role = "holder"
			}
			writerAhead = writerAhead || e.mode == "write"
		default:
			q.Role, q.Value = "waiter", string(e.data)
			if len(r.Queue) == 0 {
				q.Role = "holder"
			}
		}
		r.Queue = append(r.Queue, q)
	}
	return r, nil
}

// status reads NAME's queue and holds in Redis.
func (b *redisBackend) status(ctx context.Context, name, kind string) (*report, error) {
	began := time.Now()
	cctx, cancel := b.g.commandCtx(ctx)
	defer cancel()
	failed := func(err error) error {
		return fmt.Errorf("status %s: %w", name, b.g.requestFailed(cctx, "Redis", []string{b.cli.Options().Addr}, began, err))
	}
	keys, err := b.cli.ZRange(cctx, name+"/queue", 0, -1).Result()
	if err != nil {
		return nil, failed(err)
	}
	granted, err := b.cli.HKeys(cctx, name+"/held").Result()
	if err != nil {
		return nil, failed(err)
	}
	isGranted := map[string]bool{}
	for _, k := range granted {
		isGranted[k] = true
	}
	r := newReport("Redis", name, kind)
	if kind == "" && len(keys) > 0 {
		r.Kind = kindLock
	}
	for _, k := range keys {
		f, err := b.cli.HGetAll(cctx, k).Result()
		if err != nil {
			return nil, failed(err)
		}
		if len(f) == 0 {
			continue // expired with its session
		}
		created, _ := strconv.ParseInt(k[strings.LastIndexByte(k, '/')+1:], 10, 64)
		q := queueEntry{Position: len(r.Queue) + 1, Key: k, CreatedRevision: created, Role: "waiter"}
		if id, err := strconv.ParseInt(f["l"], 10, 64); err == nil {
			q.Lease = leaseHex(id)
		}
		if ttl, err := b.cli.PTTL(cctx, k).Result(); err == nil && ttl > 0 {
			secs := int64(ttl / time.Second)
			q.LeaseTTL = &secs
		}
		if m := f["m"]; m == "r" || m == "w" {
			if r.KindFrom == "layout" {
				r.Kind = kindRWLock
			}
			q.Mode = map[string]string{"r": "read", "w": "write"}[m]
		}
		if isGranted[k] {
			q.Role = "holder"
			if t, err := strconv.ParseInt(f["t"], 10, 64); err == nil {
				q.Token = t
			}
		}
		if v, ok := f["v"]; ok && q.Mode == "" {
			q.Value = v
		}
		if r.Kind == kindElection {
			q.Role = map[string]string{"holder": "leader", "waiter": "candidate"}[q.Role]
		}
		r.Queue = append(r.Queue, q)
	}
	return r, nil
}
