package redisio_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/internal/testhook"
	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/redisio"
)

// layoutTTL is short, so that a refresh (every TTL/3) comes soon, and long
// enough that a healthy session is not suspended on a loaded machine.
const layoutTTL = 1500 * time.Millisecond

// owned is one acquisition of any primitive, as the layout tests drive it.
type owned struct {
	key     string
	created int64
	token   fencing.Token
	lease   int64
}

// party is one owner of a primitive, on its own client and session.
type party struct {
	session *redisio.Session
	svc     interface {
		Subscribe(context.Context) <-chan primitives.Event
		Done() <-chan struct{}
		Err() error
	}
	acquire func(context.Context) (owned, error)
	// try acquires only if free now: ErrLockTaken (or a deadline passed,
	// for an election) when it is not.
	try func(context.Context) error
	// release releases exactly what acquire returned: nil, or an error
	// wrapping notHeld.
	release func(context.Context, owned) error
	notHeld error
}

// kinds are the ways of holding a name the layout tests try: the holder's
// kind, and its contenders'.
var kinds = []struct {
	name, holder, contender string
}{
	{"lock", "lock", "lock"},
	{"rwlock-writer", "write", "write"},
	{"rwlock-writer-reader", "write", "read"},
	{"rwlock-reader-writer", "read", "write"},
	{"election", "election", "election"},
}

func newParty(t *testing.T, r *testserver.Redis, name, kind string) *party {
	t.Helper()
	cli := newClient(t, r)
	s, err := redisio.NewSession(cli, redisio.WithTTL(layoutTTL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	p := &party{session: s}
	switch kind {
	case "lock":
		l, err := redisio.NewLock(cli, name, redisio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		p.svc, p.notHeld = l, lock.ErrNotHeld
		p.acquire = func(ctx context.Context) (owned, error) {
			g, err := l.Lock(ctx)
			return owned{g.Key, g.Created, g.Token(), g.LeaseID}, err
		}
		p.try = func(ctx context.Context) error { _, err := l.TryLock(ctx); return err }
		p.release = func(ctx context.Context, o owned) error { return l.Release(ctx, lock.Grant{Created: o.created}) }
	case "read", "write":
		l, err := redisio.NewRWLock(cli, name, redisio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		p.svc, p.notHeld = l, rwlock.ErrNotHeld
		lk, try := l.Lock, l.TryLock
		if kind == "read" {
			lk, try = l.RLock, l.TryRLock
		}
		p.acquire = func(ctx context.Context) (owned, error) {
			g, err := lk(ctx)
			return owned{g.Key, g.Created, g.Token(), g.LeaseID}, err
		}
		p.try = func(ctx context.Context) error { _, err := try(ctx); return err }
		p.release = func(ctx context.Context, o owned) error { return l.Release(ctx, rwlock.Grant{Created: o.created}) }
	case "election":
		e, err := redisio.NewElection(cli, name, redisio.WithSession(s))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		p.svc, p.notHeld = e, election.ErrNotLeader
		p.acquire = func(ctx context.Context) (owned, error) {
			if err := e.Campaign(ctx, "v"); err != nil {
				return owned{}, err
			}
			l, _ := e.Term()
			return owned{l.Key, l.Created, l.Token(), l.LeaseID}, nil
		}
		p.try = func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			if err := e.Campaign(ctx, "v"); err != nil {
				return err
			}
			return errors.New("led")
		}
		p.release = func(ctx context.Context, o owned) error {
			return e.(election.TermResigner).ResignTerm(ctx, election.Leadership{Created: o.created})
		}
	}
	return p
}

// taken reports whether err is a try's answer that the name is taken.
func taken(err error) bool {
	return errors.Is(err, lock.ErrLockTaken) || errors.Is(err, rwlock.ErrRWLockTaken) || errors.Is(err, context.DeadlineExceeded)
}

// TestLayoutKeyDeleted: deleting any one key of a name's layout behind a
// holder's back (the queue, the held record, the counter, an rwlock's read
// token, the hold's own key, its session's key, the session counter) never
// lets another owner hold beside it. Either the holder keeps its hold (no
// Lost; a waiter queued before the deletion and an owner trying after it
// are held back until it releases), or it is told Lost within the stated
// bound (its next refresh: TTL/3 and the refresh's round trip) and before
// anyone else holds. Either way the next holder's token is higher.
func TestLayoutKeyDeleted(t *testing.T) {
	r := testserver.StartRedis(t)
	testkit.NoLeaks(t)
	keys := []struct {
		name string
		key  func(name string, h owned) string
		lost bool // the holder is told Lost
	}{
		{"queue", func(n string, _ owned) string { return n + "/queue" }, false},
		{"held", func(n string, _ owned) string { return n + "/held" }, false},
		{"seq", func(n string, _ owned) string { return n + "/seq" }, false},
		{"rtok", func(n string, _ owned) string { return n + "/rtok" }, false},
		{"sessions", func(string, owned) string { return "disco/sessions" }, false},
		{"hold", func(_ string, h owned) string { return h.key }, true},
		{"session", func(_ string, h owned) string { return "disco/session/" + strconv.FormatInt(h.lease, 10) }, true},
	}
	admin := newClient(t, r)
	for _, k := range kinds {
		for _, key := range keys {
			t.Run(k.name+"/"+key.name, func(t *testing.T) {
				t.Parallel()
				r, admin := r, admin
				if key.name == "sessions" {
					// The session counter is every name's: it gets a
					// server of its own.
					r = testserver.StartRedis(t)
					admin = newClient(t, r)
				}
				deleteBehindHoldersBack(t, r, admin, k.holder, k.contender, key.key, key.lost)
			})
		}
	}
}

func deleteBehindHoldersBack(t *testing.T, r *testserver.Redis, admin *redis.Client, holderKind, contenderKind string,
	keyOf func(string, owned) string, wantLost bool) {
	name := t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder := newParty(t, r, name, holderKind)
	waiter := newParty(t, r, name, contenderKind)
	other := newParty(t, r, name, contenderKind)
	events := holder.svc.Subscribe(ctx)
	h, err := holder.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		o   owned
		err error
	}
	waited := make(chan result, 1)
	go func() {
		o, err := waiter.acquire(ctx)
		waited <- result{o, err}
	}()
	testkit.Eventually(t, 10*time.Second, "the waiter queued", func() bool {
		n, err := admin.ZCard(ctx, name+"/queue").Result()
		return err == nil && n == 2
	})

	resume := make(chan struct{})
	testhook.PauseRenewal(holder.session, resume) // the holder hears nothing until resumed
	key := keyOf(name, h)
	if err := admin.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if key == "disco/sessions" {
		// New sessions after the counter is gone must not take a live
		// session's id (and so its key).
		for range h.lease + 2 {
			s, err := redisio.NewSession(newClient(t, r), redisio.WithTTL(layoutTTL))
			if err != nil {
				t.Fatal(err)
			}
			if s.LeaseID() == h.lease || s.LeaseID() == holder.session.LeaseID() {
				t.Errorf("new session %d after the session counter was deleted has the live holder's id", s.LeaseID())
			}
			defer s.Close()
		}
	}
	if err := other.try(ctx); !taken(err) {
		t.Fatalf("after %s was deleted, another owner's try while the holder (not yet told) holds: %v, want taken", key, err)
	}
	resumed := time.Now()
	close(resume)

	var next result
	if wantLost {
		bound := layoutTTL/3 + time.Second // a refresh interval and the refresh's round trip, with room
		var lost primitives.Lost
	events:
		for {
			select {
			case e := <-events:
				if l, ok := e.(primitives.Lost); ok && l.Created == h.created {
					lost = l
					break events
				}
			case <-time.After(time.Until(resumed.Add(bound))):
				t.Fatalf("no Lost within %v after %s was deleted and the holder's refresh resumed", bound, key)
			case o := <-waited:
				t.Fatalf("the waiter holds (%+v, %v) before the holder was told Lost", o.o, o.err)
			}
		}
		if !errors.Is(lost.Err, primitives.ErrLost) {
			t.Fatalf("Lost %+v, want an error wrapping ErrLost", lost)
		}
		next = <-waited
		if err := holder.release(ctx, h); !errors.Is(err, holder.notHeld) && !errors.Is(err, primitives.ErrLost) {
			t.Fatalf("the holder's release after Lost: %v, want not held", err)
		}
	} else {
		spell := time.NewTimer(layoutTTL) // several refreshes: the measured quiet spell
		select {
		case o := <-waited:
			t.Fatalf("after %s was deleted, the waiter holds (%+v, %v) while the holder holds", key, o.o, o.err)
		case e := <-lostOf(events, h.created):
			t.Fatalf("after %s was deleted, the holder got %+v", key, e)
		case <-spell.C:
		}
		if err := other.try(ctx); !taken(err) {
			t.Fatalf("after %s was deleted, another owner's try while the holder holds: %v, want taken", key, err)
		}
		if err := holder.release(ctx, h); err != nil {
			t.Fatalf("the holder's release: %v", err)
		}
		next = <-waited
	}
	if next.err != nil {
		t.Fatalf("the waiter: %v", next.err)
	}
	if next.o.token <= h.token {
		t.Fatalf("the waiter's token %d is not above the holder's %d", next.o.token, h.token)
	}
	if err := waiter.release(ctx, next.o); err != nil {
		t.Fatalf("the waiter's release: %v", err)
	}
	// Readers of one epoch share its token; any other next holder's is
	// higher.
	if o, err := other.acquire(ctx); err != nil || o.token < next.o.token || (o.token == next.o.token && contenderKind != "read") {
		t.Fatalf("a third acquisition: %+v, %v, want a token above %d", o, err, next.o.token)
	} else if err := other.release(ctx, o); err != nil {
		t.Fatal(err)
	}
}

// lostOf forwards the first Lost or Released of created from events.
func lostOf(events <-chan primitives.Event, created int64) <-chan string {
	out := make(chan string, 1)
	go func() {
		for e := range events {
			switch e := e.(type) {
			case primitives.Lost:
				if e.Created == created {
					out <- fmt.Sprintf("%+v", e)
					return
				}
			case primitives.Released:
				if e.Created == created {
					return
				}
			}
		}
	}()
	return out
}
