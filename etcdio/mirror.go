package etcdio

import (
	"cmp"
	"context"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// mirror is the session's copy of the keys under one prefix, kept current by
// one long-lived watch (see follow). All services of a session that use the
// prefix share it, and it lives as long as any of them does. Its fields are
// owned by the loop; its helper only posts what it reads.
//
// A full mirror (puts) at revision rev holds exactly the keys that exist
// under the prefix at rev. A deletions-only mirror, for a session's own keys,
// is told only of deletions: it knows the keys that existed when it last
// loaded and the keys deleted since, which is what noticing a lost key needs,
// at half the watch events. A blind mirror is a deletions-only one that
// never reads the keys (has and gone say nothing of it): its revision says
// up to where the deletions are known, for a waiter that already knows the
// key it waits behind (an election's candidate). It costs its watch alone.
type mirror struct {
	prefix   string
	puts     bool  // a full mirror; otherwise deletions only
	blind    bool  // deletions only, and the keys never read
	ready    bool  // loaded at least once
	rev      int64 // full: the revision keys reflects; the latest revision seen
	loadRev  int64 // the revision of the last load
	keys     map[string]*mvccpb.KeyValue
	recent   [16]deletion // deletions only: the latest deletions, a ring
	next     int
	watchers map[*service]struct{}
	// Full mirrors: the keys in the order of their creation (stale
	// entries, of keys deleted or created again since, are skipped and
	// dropped as leader meets them); and the leader (see leader), while
	// leaderKnown: a change of keys forgets it.
	order       []created
	leaderKV    *mvccpb.KeyValue
	leaderKnown bool
	cancel      context.CancelFunc
	poke        chan struct{} // asks the helper for a progress notification
}

// mirrorID names a session's mirror: one per prefix and kind.
type mirrorID struct {
	prefix      string
	puts, blind bool
}

func (m *mirror) id() mirrorID { return mirrorID{m.prefix, m.puts, m.blind} }

// created is a key and its CreateRevision.
type created struct {
	key string
	rev int64
}

// deletion is a key and the revision it was deleted at.
type deletion struct {
	key string
	rev int64
}

func newMirror(prefix string, puts bool) *mirror {
	return &mirror{prefix: prefix, puts: puts, keys: map[string]*mvccpb.KeyValue{}, watchers: map[*service]struct{}{},
		poke: make(chan struct{}, 1)}
}

// openMirror returns the mirror id names, starting it if needed, and adds
// svc to its watchers. Loop only.
func (s *Session) openMirror(id mirrorID, svc *service) *mirror {
	prefix, puts := id.prefix, id.puts
	m := s.mirrors[id]
	if m == nil {
		m = newMirror(prefix, puts)
		m.blind = id.blind
		var ctx context.Context
		ctx, m.cancel = context.WithCancel(s.ctx)
		s.mirrors[id] = m
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if !puts {
			opts = append(opts, clientv3.WithFilterPut())
		}
		s.goHelper(func(context.Context) {
			s.follow(ctx, follower{key: prefix, opts: opts, kind: svc.spec.kind,
				synced: func(rctx context.Context, rev int64) error {
					if m.blind {
						// Every deletion after rev is to come.
						s.post(func() { s.mirrorLoaded(m, nil, rev) })
						return nil
					}
					resp, err := s.cli.Get(rctx, prefix, clientv3.WithPrefix())
					if err != nil {
						return err
					}
					s.post(func() { s.mirrorLoaded(m, resp.Kvs, resp.Header.Revision) })
					return nil
				},
				changed: func(_ context.Context, evs []*clientv3.Event) error {
					s.post(func() { s.mirrorChanged(m, evs) })
					return nil
				},
				progress: func(rev int64) { s.post(func() { s.mirrorProgressed(m, rev) }) },
				poke:     m.poke,
			})
		})
	}
	m.watchers[svc] = struct{}{}
	return m
}

// closeMirror removes svc from m's watchers and stops m when nobody is left.
// Loop only.
func (s *Session) closeMirror(m *mirror, svc *service) {
	delete(m.watchers, svc)
	if len(m.watchers) == 0 && s.mirrors[m.id()] == m {
		delete(s.mirrors, m.id())
		m.cancel()
	}
}

// mirrorLoaded and mirrorChanged update m and tell its watchers. Loop only.
func (s *Session) mirrorLoaded(m *mirror, kvs []*mvccpb.KeyValue, rev int64) {
	if m.load(kvs, rev) {
		s.notify(m)
	}
}

func (s *Session) mirrorChanged(m *mirror, evs []*clientv3.Event) {
	if m.apply(evs) {
		s.notify(m)
	}
}

// mirrorProgressed: every event under m's prefix up to rev has been applied.
// Loop only.
func (s *Session) mirrorProgressed(m *mirror, rev int64) {
	if m.progressed(rev) {
		s.notify(m)
	}
}

func (s *Session) notify(m *mirror) {
	for svc := range m.watchers {
		svc.mirrorChanged(m)
	}
}

// load replaces the mirror's keys with a read at rev. It reports whether
// watchers should be told (the read was not older than what the mirror
// already showed).
func (m *mirror) load(kvs []*mvccpb.KeyValue, rev int64) bool {
	if rev < m.rev {
		return false // an older read than what the watch already showed
	}
	clear(m.keys)
	m.order = m.order[:0]
	for _, kv := range kvs {
		m.keys[string(kv.Key)] = kv
		if m.puts {
			m.order = append(m.order, created{string(kv.Key), kv.CreateRevision})
		}
	}
	slices.SortFunc(m.order, func(a, b created) int { return cmp.Compare(a.rev, b.rev) })
	m.rev, m.loadRev, m.ready = rev, rev, true
	m.leaderKnown = false
	return true
}

// apply applies one watch response. Its revision is that of its last event:
// a response's header may name a later revision whose events are still to
// come. It reports whether watchers should be told.
func (m *mirror) apply(evs []*clientv3.Event) bool {
	for _, ev := range evs {
		if ev.Kv.ModRevision <= m.rev {
			continue // already in a load
		}
		switch ev.Type {
		case clientv3.EventTypePut:
			key := string(ev.Kv.Key)
			if old := m.keys[key]; old == nil || old.CreateRevision != ev.Kv.CreateRevision {
				// Created after every key the mirror has: last in order.
				m.order = append(m.order, created{key, ev.Kv.CreateRevision})
			}
			m.keys[key] = ev.Kv
		case clientv3.EventTypeDelete:
			delete(m.keys, string(ev.Kv.Key))
			if !m.puts {
				m.recent[m.next] = deletion{string(ev.Kv.Key), ev.Kv.ModRevision}
				m.next = (m.next + 1) % len(m.recent)
			}
		}
		m.rev = ev.Kv.ModRevision
		m.leaderKnown = false
	}
	return m.ready
}

// progressed moves a full mirror to rev, which a progress notification
// says it has every event up to. It reports whether watchers should be told.
func (m *mirror) progressed(rev int64) bool {
	if !m.ready || !m.puts || rev <= m.rev {
		return false
	}
	m.rev = rev
	return true
}

// requestProgress asks the mirror's helper for a progress notification, so
// that the mirror's revision catches up with etcd's even when nothing under
// its prefix changes. It never blocks. Loop only.
func (m *mirror) requestProgress() {
	select {
	case m.poke <- struct{}{}:
	default:
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
	// ones was reported when it happened: whoever needs it later remembers
	// it, as checkGrant does.)
	for _, d := range m.recent {
		if d.key == key && d.rev > rev {
			return true
		}
	}
	return m.loadRev >= rev && !m.has(key)
}

// leader returns the key that ours accepts with the lowest
// CreateRevision, or nil if there is none, from a full mirror. ours is the
// one layout of the services that share the mirror (an election's: one
// prefix, one kind, see claim), so the answer is computed once per change
// of the keys: every candidate on the session asks after each change, and
// a walk of the keys each would cost the session's loop candidates x keys.
func (m *mirror) leader(ours func(*mvccpb.KeyValue) bool) *mvccpb.KeyValue {
	if m.leaderKnown {
		return m.leaderKV
	}
	live := func(c created) *mvccpb.KeyValue {
		if kv := m.keys[c.key]; kv != nil && kv.CreateRevision == c.rev {
			return kv
		}
		return nil
	}
	// Stale entries ahead of the leader go; a key of another layout stays
	// (a nested name's: rare). Stale entries further back go when they
	// outnumber the keys.
	for len(m.order) > 0 && live(m.order[0]) == nil {
		m.order = m.order[1:]
	}
	if len(m.order) > 2*len(m.keys)+16 {
		m.order = slices.DeleteFunc(m.order, func(c created) bool { return live(c) == nil })
	}
	m.leaderKV = nil
	for _, c := range m.order {
		if kv := live(c); kv != nil && ours(kv) {
			m.leaderKV = kv
			break
		}
	}
	m.leaderKnown = true
	return m.leaderKV
}
