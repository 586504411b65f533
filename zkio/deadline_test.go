package zkio_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ahrtr/disco/internal/testkit"
	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/primitives/election"
	"github.com/ahrtr/disco/primitives/lock"
	"github.com/ahrtr/disco/zkio"
)

// TestShortDeadlines: a Lock or Campaign whose context ends returns an
// error wrapping ctx.Err() (never another error: a server's, a
// connection's), while the name changes hands under it; and the waiters
// that gave up leave nothing behind.
func TestShortDeadlines(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type acq struct {
		get, put func(context.Context) error
	}
	kinds := map[string]func(path string) acq{
		"lock": func(path string) acq {
			l := testkit.ClosedAtEnd[lock.Service](t)(zkio.NewLock(nil, path, zkio.WithSession(s)))
			return acq{func(ctx context.Context) error { _, err := l.Lock(ctx); return err }, l.Unlock}
		},
		"election": func(path string) acq {
			e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, path, zkio.WithSession(s)))
			return acq{func(ctx context.Context) error { return e.Campaign(ctx, "v") }, e.Resign}
		},
	}
	for kind, mk := range kinds {
		path := "/deadlines/" + kind
		const owners, rounds = 6, 40
		var wg sync.WaitGroup
		errs := make(chan error, owners*rounds)
		for i := range owners {
			a := mk(path)
			wg.Go(func() {
				for range rounds {
					d := time.Duration(500+rand.IntN(2500)) * time.Microsecond
					if i == 0 {
						d = time.Second // one owner that mostly gets through, so the name changes hands
					}
					cctx, ccancel := context.WithTimeout(ctx, d)
					err := a.get(cctx)
					switch {
					case err == nil:
						if perr := a.put(ctx); perr != nil {
							errs <- perr
						}
					case cctx.Err() == nil:
						errs <- fmt.Errorf("%s failed before its context ended: %w", kind, err)
					case !errors.Is(err, cctx.Err()):
						errs <- fmt.Errorf("%s whose context ended (%v): %w", kind, cctx.Err(), err)
					}
					ccancel()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		queued(t, servers, path, 0)
	}
}

// TestEndedContextWins: a Lock or Campaign called with a context that has
// ended returns an error wrapping ctx.Err() even when the primitive is
// also closed or its session lost; the error still wraps that too.
func TestEndedContextWins(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	opts := []zkio.Option{zkio.WithSessionTimeout(5 * time.Second)}
	l, err := zkio.NewLock(servers, "/ended/lock", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(done); !errors.Is(err, context.Canceled) || !errors.Is(err, primitives.ErrClosed) {
		t.Errorf("Lock of a closed lock with an ended context: %v, want Canceled and ErrClosed", err)
	}
	s, err := zkio.NewSession(servers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e := testkit.ClosedAtEnd[election.Service](t)(zkio.NewElection(nil, "/ended/election", zkio.WithSession(s)))
	zkio.KillSession(s)
	<-e.Done()
	if err := e.Campaign(done, "v"); !errors.Is(err, context.Canceled) || !errors.Is(err, primitives.ErrLost) {
		t.Errorf("Campaign on a lost session with an ended context: %v, want Canceled and ErrLost", err)
	}
}
