package zkio_test

import (
	"context"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestHealthySessionNeverSuspended: an idle session whose server answers
// at once is never Suspended, whatever WithSuspendAfter's part: also below
// 1/3, the part of the timeout after which the client's own pings go (as
// on etcd and Redis).
func TestHealthySessionNeverSuspended(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	const ttl = 3 * time.Second
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(ttl), zkio.WithSuspendAfter(0.2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, "/renew/healthy", zkio.WithSession(s)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := l.Subscribe(ctx)
	if _, err := l.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.NeverSuspended(t, events, 2*ttl) // two TTLs: idle
}
