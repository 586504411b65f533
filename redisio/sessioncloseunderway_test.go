package redisio_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/internal/testserver"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/redisio"
)

// TestSessionCloseWaitsForAcquisitionUnderWay: a Session's Close, as an
// acquisition on it has had its hold granted in Redis and the answer is
// on its way, returns only once that hold is withdrawn, as a primitive's
// Close does: nothing of the session is left in Redis once Close returns.
// Close found nothing to release and returned, leaving the hold granted
// to a closed session until the acquirer withdrew it.
func TestSessionCloseWaitsForAcquisitionUnderWay(t *testing.T) {
	r := testserver.StartRedis(t)
	const name = "session-close-underway"
	admin := newClient(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The enqueue runs in Redis; its answer is held until Close has ended
	// the lock.
	g := newScriptGate(true, func(a []any) bool { return isScript(a, 4, -1, name+"/seq") })
	proceed := sync.OnceFunc(func() { close(g.proceed) })
	defer proceed() // on a failure
	cli := newClient(t, r)
	cli.AddHook(g)
	// The acquisition's withdrawal (the release script, five keys) is
	// held until Close returns, for at most two seconds: a Close that
	// waits for the acquisition returns only after it.
	closeReturned := make(chan struct{})
	withdrawal := newScriptGate(false, func(a []any) bool { return isScript(a, 5, -1, name+"/seq") })
	withdrawal.armed.Store(true)
	go func() {
		select {
		case <-closeReturned:
		case <-time.After(2 * time.Second):
		}
		close(withdrawal.proceed)
	}()
	cli.AddHook(withdrawal)
	// A script on the name's keys that runs once Close has returned is the
	// acquisition's, withdrawing its hold late.
	var returned, late atomic.Bool
	cli.AddHook(afterScript(func(args []any) {
		if returned.Load() && len(args) > 3 && strings.HasPrefix(fmt.Sprint(args[3]), name+"/") {
			late.Store(true)
		}
	}))
	s, err := redisio.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	l := testkit.ClosedAtEnd[lock.Service](t)(redisio.NewLock(cli, name, redisio.WithSession(s)))
	g.armed.Store(true)
	locked := make(chan error, 1)
	go func() { _, err := l.Lock(ctx); locked <- err }()
	<-g.reached // granted in Redis, the answer on its way
	closed := make(chan []string, 1)
	go func() {
		_ = s.Close()
		returned.Store(true)
		left := leftBehindOf(ctx, admin, name)
		close(closeReturned)
		closed <- left
	}()
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the session's Close did not end the lock")
	}
	proceed()
	left := <-closed
	if err := <-locked; !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("Lock: %v, want ErrClosed", err)
	}
	if len(left) > 0 {
		t.Errorf("left once the session's Close returned: %v", left)
	}
	if late.Load() {
		t.Errorf("the acquisition under way withdrew its hold after the session's Close returned")
	}
	testkit.Eventually(t, 10*time.Second, "nothing left", func() bool { return len(leftBehindOf(ctx, admin, name)) == 0 })
}
