package zkio_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/primitives/rwlock"
	"github.com/ahrtr/disco/zkio"
)

// TestNestedNamesIndependent: names on one backend are independent. A
// primitive on /n never takes the znodes of /n/sub (whose parent znode
// "sub" is a child of /n) as its own, and the other way round: while a
// lock, an rwlock's writer and a leader hold on /n/sub, a lock, an rwlock
// and an election on /n are free, and then the same on /n/sub while /n is
// held.
func TestNestedNamesIndependent(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	on := func(sess *zkio.Session, path string) (lock.Service, rwlock.Service, election.Service) {
		t.Helper()
		l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(sess)))
		rw := testkit.ClosedAtEnd[rwlock.Service](t)(zkio.NewRWLock(nil, path+"/rw", zkio.WithSession(sess)))
		e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, path+"/e", zkio.WithSession(sess)))
		return l, rw, e
	}
	hold := func(l lock.Service, rw rwlock.Service, e election.Service) {
		t.Helper()
		if _, err := l.TryLock(ctx); err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		if _, err := rw.TryLock(ctx); err != nil {
			t.Fatalf("rwlock TryLock: %v", err)
		}
		if err := e.Campaign(ctx, "nested"); err != nil {
			t.Fatalf("Campaign: %v", err)
		}
	}
	free := func(what string, l lock.Service, rw rwlock.Service, e election.Service) {
		t.Helper()
		if ld, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
			t.Errorf("%s: Leader = %+v, %v, want ErrNoLeader", what, ld, err)
		}
		hold(l, rw, e)
		if ld, err := e.Leader(ctx); err != nil || ld.Value != "nested" {
			t.Errorf("%s: Leader after Campaign = %+v, %v", what, ld, err)
		}
	}
	const n = "/nested/n"
	il, irw, ie := on(s, n+"/sub")
	hold(il, irw, ie)
	// The rwlock and the election of /n are /n/rw and /n/e; those of
	// /n/sub are /n/sub/rw and /n/sub/e: /n/sub/e's znodes are below
	// /n/sub, the parent of /n's, as /n/sub/rw's are.
	ol, orw, oe := on(o, n)
	free("/n while /n/sub holds", ol, orw, oe)

	// The other way round, on fresh names: /m held first, then /m/sub.
	const m = "/nested/m"
	ml, mrw, me := on(s, m)
	hold(ml, mrw, me)
	sl, srw, se := on(o, m+"/sub")
	free("/m/sub while /m holds", sl, srw, se)

	// A lock directly on the parent of another lock's path.
	parent := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, n+"/sub", zkio.WithSession(o)))
	if _, err := parent.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("TryLock of a held lock: %v, want ErrLockTaken", err)
	}
	child := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, n+"/sub/deeper", zkio.WithSession(o)))
	if _, err := child.TryLock(ctx); err != nil {
		t.Fatalf("TryLock of /n/sub/deeper while /n/sub holds: %v", err)
	}
	if _, err := il.TryLock(ctx); !errors.Is(err, lock.ErrLockTaken) {
		t.Fatalf("second TryLock: %v", err)
	}
	if err := il.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.TryLock(ctx); err != nil {
		t.Fatalf("TryLock of /n/sub after its holder unlocked, with /n/sub/deeper held: %v", err)
	}
}
