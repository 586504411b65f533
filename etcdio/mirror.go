package etcdio

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// mirror is the session's copy of the keys under one prefix, kept current by
// one long-lived watch. All primitives of a session that use the prefix share
// it, and it lives as long as any of them does. Its fields are owned by the
// loop; its sync goroutine only posts what it reads.
//
// A full mirror (puts) at revision rev holds exactly the keys that exist
// under the prefix at rev. A deletions-only mirror, for a session's own keys,
// is told only of deletions: it knows the keys that existed when it loaded
// and the keys deleted since, which is what noticing a lost key needs, at
// half the watch events.
type mirror struct {
	prefix   string
	puts     bool  // a full mirror; otherwise deletions only
	ready    bool  // loaded at least once
	rev      int64 // full: the revision keys reflects; the latest revision seen
	loadRev  int64 // the revision of the last load
	keys     map[string]*mvccpb.KeyValue
	recent   [16]deletion // deletions only: the latest deletions
	next     int
	watchers map[mirrorWatcher]struct{}
	cancel   context.CancelFunc
}

// deletion is a key and the revision it was deleted at.
type deletion struct {
	key string
	rev int64
}

// mirrorWatcher is told, on the loop, after every change of a mirror it
// watches.
type mirrorWatcher interface {
	mirrorChanged(m *mirror)
}

// openMirror returns the mirror of prefix, starting it if needed, and adds w
// to its watchers. puts asks for a full mirror. Loop only.
func (s *Session) openMirror(prefix string, puts bool, w mirrorWatcher) *mirror {
	m := s.mirrors[prefix]
	if m == nil {
		ctx, cancel := context.WithCancel(s.ctx)
		m = &mirror{prefix: prefix, puts: puts, keys: map[string]*mvccpb.KeyValue{}, watchers: map[mirrorWatcher]struct{}{}, cancel: cancel}
		s.mirrors[prefix] = m
		s.wg.Add(1)
		go s.syncMirror(ctx, m)
	}
	m.watchers[w] = struct{}{}
	return m
}

// closeMirror removes w from m's watchers and stops m when nobody is left.
// Loop only.
func (s *Session) closeMirror(m *mirror, w mirrorWatcher) {
	delete(m.watchers, w)
	if len(m.watchers) == 0 && s.mirrors[m.prefix] == m {
		delete(s.mirrors, m.prefix)
		m.cancel()
	}
}

// syncMirror follows the prefix with a watch from the current revision, in
// sync from the start, and once etcd confirms the watch it loads the prefix;
// events the load already reflects are skipped. (A watch from a past
// revision would be served by etcd's catch-up path, up to 100 ms late.)
// Whenever the watch fails (compaction, a member without a leader) it starts
// over. It runs until ctx ends.
func (s *Session) syncMirror(ctx context.Context, m *mirror) {
	defer s.wg.Done()
	const retry = 100 * time.Millisecond
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify()}
	if !m.puts {
		opts = append(opts, clientv3.WithFilterPut())
	}
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		loaded := false
		for wr := range s.cli.Watch(wctx, m.prefix, opts...) {
			if err := wr.Err(); err != nil {
				s.log.Debug("mirror watch failed", zap.String("prefix", m.prefix), zap.Error(err))
				break
			}
			if wr.Created && !loaded {
				resp, err := s.cli.Get(ctx, m.prefix, clientv3.WithPrefix())
				if err != nil {
					s.log.Debug("mirror load failed", zap.String("prefix", m.prefix), zap.Error(err))
					break
				}
				kvs, rev := resp.Kvs, resp.Header.Revision
				s.post(func() { m.load(kvs, rev) })
				loaded = true
				continue
			}
			if len(wr.Events) == 0 || !loaded {
				continue
			}
			evs := wr.Events
			s.post(func() { m.apply(evs) })
		}
		cancel()
		sleepCtx(ctx, retry)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (m *mirror) load(kvs []*mvccpb.KeyValue, rev int64) {
	if rev < m.rev {
		return // an older read than what the watch already showed
	}
	clear(m.keys)
	for _, kv := range kvs {
		m.keys[string(kv.Key)] = kv
	}
	m.rev, m.loadRev, m.ready = rev, rev, true
	m.notify()
}

// apply applies one watch response. Its revision is that of its last event:
// a response's header may name a later revision whose events are still to
// come.
func (m *mirror) apply(evs []*clientv3.Event) {
	for _, ev := range evs {
		if ev.Kv.ModRevision <= m.rev {
			continue // already in a load
		}
		switch ev.Type {
		case clientv3.EventTypePut:
			m.keys[string(ev.Kv.Key)] = ev.Kv
		case clientv3.EventTypeDelete:
			delete(m.keys, string(ev.Kv.Key))
			if !m.puts {
				m.recent[m.next] = deletion{string(ev.Kv.Key), ev.Kv.ModRevision}
				m.next = (m.next + 1) % len(m.recent)
			}
		}
		m.rev = ev.Kv.ModRevision
	}
	m.notify()
}

func (m *mirror) notify() {
	if !m.ready {
		return
	}
	for w := range m.watchers {
		w.mirrorChanged(m)
	}
}

// has reports whether key is known to exist at the mirror's revision. A key
// created after that revision is not known yet: callers first check that
// m.rev has reached the key's creation.
func (m *mirror) has(key string) bool { return m.keys[key] != nil }

// gone reports whether key, created at rev, is known to be deleted.
func (m *mirror) gone(key string, rev int64) bool {
	if !m.ready {
		return false
	}
	if m.puts {
		return m.rev >= rev && !m.has(key)
	}
	// Deletions only: the key was deleted lately, after it was created
	// (a name is reused by its owner's later acquisitions), or it existed
	// before the last load but not in it. (A deletion older than the recent
	// ones was reported when it happened.)
	for _, d := range m.recent {
		if d.key == key && d.rev > rev {
			return true
		}
	}
	return m.loadRev >= rev && !m.has(key)
}

// first returns the key under sub (a prefix within m's) with the lowest
// CreateRevision, or nil if there is none.
func (m *mirror) first(sub string) *mvccpb.KeyValue {
	var best *mvccpb.KeyValue
	for k, kv := range m.keys {
		if strings.HasPrefix(k, sub) && (best == nil || kv.CreateRevision < best.CreateRevision) {
			best = kv
		}
	}
	return best
}

// anyBefore reports whether a key under sub was written before rev. Queue
// keys are written once, so their CreateRevision and ModRevision agree;
// ModRevision is what recipes.RWMutex orders by, CreateRevision what
// concurrency.Mutex and Election do, and for a key written once both give
// the same order. A key that was updated (a leader's Proclaim) counts from
// its creation.
func (m *mirror) anyBefore(sub string, rev int64) bool {
	for k, kv := range m.keys {
		if kv.CreateRevision < rev && strings.HasPrefix(k, sub) {
			return true
		}
	}
	return false
}
