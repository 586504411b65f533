package zkio_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/zkio"
)

// TestLostCreateThenFailedLookup: a create whose reply was lost is looked
// up by its guid until the lookup answers, however many lookups fail,
// before anything is created again. Before, a lookup that failed was
// followed by a second create of the same guid: the first znode, under the
// same live session, sat just ahead of the second, and Lock waited behind
// its own znode until its context ended (and the name stayed blocked for
// everyone until the session ended).
func TestLostCreateThenFailedLookup(t *testing.T) {
	servers := startZooKeeper(t)
	s, err := zkio.NewSession(servers)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lost := zkio.LoseFirstCreateReply(s)
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
