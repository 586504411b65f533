package etcdio

import (
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func kv(key string, created, mod int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), CreateRevision: created, ModRevision: mod}
}

func put(key string, created, mod int64) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, created, mod)}
}

func del(key string, rev int64) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
}

// TestMirrorGone pins the rules by which a mirror says a key is known to be
// deleted, for full and deletions-only mirrors.
func TestMirrorGone(t *testing.T) {
	type check struct {
		key  string
		rev  int64
		gone bool
	}
	cases := []struct {
		name   string
		puts   bool
		load   []*mvccpb.KeyValue
		loadAt int64
		events [][]*clientv3.Event
		checks []check
	}{
		{name: "not loaded yet: nothing is gone", puts: true,
			checks: []check{{"a", 1, false}}},
		{name: "full: a key created after the mirror's revision is not known gone", puts: true,
			load: []*mvccpb.KeyValue{kv("a", 5, 5)}, loadAt: 10,
			checks: []check{{"a", 5, false}, {"b", 11, false}, {"b", 9, true}}},
		{name: "full: deleted after load", puts: true,
			load: []*mvccpb.KeyValue{kv("a", 5, 5)}, loadAt: 10,
			events: [][]*clientv3.Event{{del("a", 12)}},
			checks: []check{{"a", 5, true}}},
		{name: "full: a reused name created anew is not gone", puts: true,
			load: []*mvccpb.KeyValue{kv("a", 5, 5)}, loadAt: 10,
			events: [][]*clientv3.Event{{del("a", 12)}, {put("a", 13, 13)}},
			checks: []check{{"a", 13, false}, {"a", 5, false}}},
		{name: "deletions only: a recent deletion after creation", puts: false,
			load: []*mvccpb.KeyValue{kv("a", 5, 5)}, loadAt: 10,
			events: [][]*clientv3.Event{{del("a", 12)}},
			checks: []check{{"a", 5, true}, {"a", 13, false}}},
		{name: "deletions only: missing from the load after its creation", puts: false,
			load: nil, loadAt: 10,
			checks: []check{{"a", 5, true}, {"a", 11, false}}},
		{name: "deletions only: a key created after the load is known gone by the ring", puts: false,
			loadAt: 10,
			events: [][]*clientv3.Event{{del("a", 12)}},
			checks: []check{{"a", 11, true}}},
		{name: "deletions only: the ring keeps the latest 16", puts: false,
			loadAt: 10,
			events: func() [][]*clientv3.Event {
				evs := [][]*clientv3.Event{{del("a", 12)}}
				for i := int64(0); i < 16; i++ {
					evs = append(evs, []*clientv3.Event{del("x", 20+i)})
				}
				return evs
			}(),
			// Pushed out of the ring: its deletion was reported when it
			// happened, and nothing else says it is gone now.
			checks: []check{{"a", 11, false}, {"x", 19, true}}},
		{name: "events a load already reflects are skipped", puts: true,
			load: []*mvccpb.KeyValue{kv("a", 5, 5)}, loadAt: 10,
			events: [][]*clientv3.Event{{del("a", 9)}},
			checks: []check{{"a", 5, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newMirror("/p/", c.puts)
			if c.loadAt > 0 {
				if !m.load(c.load, c.loadAt) {
					t.Fatal("load refused")
				}
			}
			for _, evs := range c.events {
				m.apply(evs)
			}
			for _, ch := range c.checks {
				if got := m.gone(ch.key, ch.rev); got != ch.gone {
					t.Errorf("gone(%s, %d) = %v, want %v", ch.key, ch.rev, got, ch.gone)
				}
			}
		})
	}
}

func TestMirrorLoadOlderThanWatchIsRefused(t *testing.T) {
	m := newMirror("/p/", true)
	m.load([]*mvccpb.KeyValue{kv("/p/a", 5, 5)}, 10)
	m.apply([]*clientv3.Event{put("/p/b", 12, 12)})
	if m.load(nil, 11) {
		t.Fatal("a read older than the watch replaced the mirror")
	}
	if !m.has("/p/b") || m.rev != 12 {
		t.Fatalf("mirror at %d, has b: %v", m.rev, m.has("/p/b"))
	}
}

// The leader is the key of the layout with the lowest CreateRevision.
func TestMirrorLeaderOrdersByCreation(t *testing.T) {
	under := func(sub string) func(*mvccpb.KeyValue) bool {
		return func(kv *mvccpb.KeyValue) bool { return strings.HasPrefix(string(kv.Key), sub) }
	}
	keys := []*mvccpb.KeyValue{kv("/p/write/x", 7, 7), kv("/p/read/y", 5, 9), kv("/p/read/z", 3, 3)}
	for _, tc := range []struct{ sub, want string }{{"/p/", "/p/read/z"}, {"/p/write/", "/p/write/x"}, {"/p/none/", ""}} {
		m := newMirror("/p/", true)
		m.load(keys, 10)
		got := ""
		if l := m.leader(under(tc.sub)); l != nil {
			got = string(l.Key)
		}
		if got != tc.want {
			t.Errorf("leader under %s = %q, want %q", tc.sub, got, tc.want)
		}
	}
}

// The leader is the first key, computed once per change of the keys: a
// change (a load, a put, a delete) makes it look again.
func TestMirrorLeaderFollowsChanges(t *testing.T) {
	all := func(*mvccpb.KeyValue) bool { return true }
	m := newMirror("/p/", true)
	m.load([]*mvccpb.KeyValue{kv("/p/b", 5, 9), kv("/p/c", 7, 7)}, 10)
	if l := m.leader(all); string(l.Key) != "/p/b" {
		t.Fatalf("leader %s, want /p/b", l.Key)
	}
	m.apply([]*clientv3.Event{del("/p/b", 11)})
	if l := m.leader(all); string(l.Key) != "/p/c" {
		t.Fatalf("leader after /p/b's deletion %s, want /p/c", l.Key)
	}
	m.apply([]*clientv3.Event{put("/p/c", 7, 12)})
	if l := m.leader(all); l.ModRevision != 12 {
		t.Fatalf("leader after its update at 12: %+v", l)
	}
	m.load([]*mvccpb.KeyValue{kv("/p/a", 3, 3), kv("/p/c", 7, 12)}, 13)
	if l := m.leader(all); string(l.Key) != "/p/a" {
		t.Fatalf("leader after a load %s, want /p/a", l.Key)
	}
	// A key deleted and created again leads from its new creation.
	m.apply([]*clientv3.Event{put("/p/d", 15, 15), del("/p/a", 16), put("/p/a", 17, 17)})
	if l := m.leader(all); string(l.Key) != "/p/c" {
		t.Fatalf("leader %s, want /p/c (created at 7)", l.Key)
	}
	m.apply([]*clientv3.Event{del("/p/c", 18), del("/p/d", 19)})
	if l := m.leader(all); string(l.Key) != "/p/a" || l.CreateRevision != 17 {
		t.Fatalf("leader %+v, want /p/a created again at 17", l)
	}
	// A key of another layout is passed over, not dropped.
	m.load([]*mvccpb.KeyValue{kv("/p/n/x", 20, 20), kv("/p/e", 21, 21)}, 22)
	mine := func(kv *mvccpb.KeyValue) bool { return !strings.Contains(string(kv.Key)[len("/p/"):], "/") }
	if l := m.leader(mine); string(l.Key) != "/p/e" {
		t.Fatalf("leader %s, want /p/e past the nested key", l.Key)
	}
	m.apply([]*clientv3.Event{del("/p/e", 23)})
	if l := m.leader(mine); l != nil {
		t.Fatalf("leader %s with only a nested key left", l.Key)
	}
	// Many keys come and go behind a leader that stays: the order keeps
	// no more than a bounded share of stale entries.
	m.load([]*mvccpb.KeyValue{kv("/p/lead", 30, 30)}, 30)
	for i := int64(0); i < 200; i++ {
		m.apply([]*clientv3.Event{put("/p/w", 31+2*i, 31+2*i), del("/p/w", 32+2*i)})
		if l := m.leader(all); string(l.Key) != "/p/lead" {
			t.Fatalf("leader %s, want /p/lead", l.Key)
		}
	}
	if len(m.order) > 2*len(m.keys)+17 {
		t.Fatalf("order holds %d entries for %d keys", len(m.order), len(m.keys))
	}
	m.load(nil, 500)
	if l := m.leader(all); l != nil {
		t.Fatalf("leader of no keys %s", l.Key)
	}
}
