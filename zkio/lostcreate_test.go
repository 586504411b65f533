package zkio_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ahrtr/disco/zkio"
)

// losingSession returns the shared server's address and a session on it,
// closed when t ends, whose next create loses its reply (see
// zkio.LoseFirstCreateReply).
func losingSession(t *testing.T) ([]string, *zkio.Session, func() bool) {
	t.Helper()
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return servers, s, zkio.LoseFirstCreateReply(s)
}

// TestLostCreateThenFailedLookup: a create whose reply was lost is looked
// up by its guid until the lookup answers, however many lookups fail,
// before anything is created again. Before, a lookup that failed was
// followed by a second create of the same guid: the first znode, under the
// same live session, sat just ahead of the second, and Lock waited behind
// its own znode until its context ended (and the name stayed blocked for
// everyone until the session ended).
func TestLostCreateThenFailedLookup(t *testing.T) {
	servers, s, lost := losingSession(t)
	const path = "/test/lost-create"
	l, err := zkio.NewLock(nil, path, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Lock(ctx); err != nil {
		t.Fatalf("Lock whose create's reply was lost and whose lookup failed: %v", err)
	}
	if !lost() {
		t.Fatal("no reply lost, or no lookup failed")
	}
	children, _, err := adminConn(t, servers).Children(path)
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, c := range children {
		if strings.HasPrefix(c, "_c_") {
			mine = append(mine, c)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("znodes %q under %s, want the one Lock holds", mine, path)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLostEnterThenFailedLookup: a double barrier's Enter whose
// transaction's reply was lost, and whose lookup of its znode failed after,
// finds out whether the znode was made before it looks at the round again.
// Before, the listing after the failed lookup counted the party's own
// znode: a party of a one-party barrier got ErrFull for the round it had
// entered, and its znode stayed, unknown, under its live session.
func TestLostEnterThenFailedLookup(t *testing.T) {
	servers, s, lost := losingSession(t)
	const path = "/test/lost-enter"
	d, err := zkio.NewDoubleBarrier(nil, path, 1, zkio.WithSession(s))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Enter(ctx); err != nil {
		t.Fatalf("Enter whose transaction's reply was lost and whose lookup failed: %v", err)
	}
	if !lost() {
		t.Fatal("no reply lost, or no lookup failed")
	}
	if err := d.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	children, _, err := adminConn(t, servers).Children(path)
	if err != nil && !errors.Is(err, zk.ErrNoNode) || len(children) != 0 {
		t.Fatalf("left under %s: %q (%v)", path, children, err)
	}
}
