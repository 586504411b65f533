package zkio_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ahrtr/disco/primitives"
	"github.com/ahrtr/disco/zkio"
)

// TestSessionTimeoutOverClientLimit: a session timeout (WithSessionTimeout
// or WithTTL) over what the ZooKeeper client can ask for, int32
// milliseconds, is refused at once as bad input, by NewSession and by the
// constructors that make their own session, rather than overflowing into
// a connection that never comes; the limit itself is taken (the server
// grants what it allows).
func TestSessionTimeoutOverClientLimit(t *testing.T) {
	t.Parallel()
	servers := startZooKeeper(t)
	limit := time.Duration(math.MaxInt32) * time.Millisecond
	// Each attempt gets its own bound, so that one that hangs fails alone.
	bound := func() zkio.Option {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		t.Cleanup(cancel)
		return zkio.WithContext(ctx)
	}
	for _, opt := range []zkio.Option{zkio.WithSessionTimeout(limit + time.Millisecond), zkio.WithTTL(597 * time.Hour)} {
		start := time.Now()
		_, serr := zkio.NewSession(servers, opt, bound())
		_, lerr := zkio.NewLock(servers, "/timeout-limit", opt, bound())
		_, eerr := zkio.NewElection(servers, "/timeout-limit", opt, bound())
		for _, err := range []error{serr, lerr, eerr} {
			if !errors.Is(err, zkio.ErrInvalidArgument) || !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "at most") {
				t.Errorf("%v: want an error wrapping ErrInvalidArgument that names the limit", err)
			}
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("refused after %v, want at once", took)
		}
	}
	s, err := zkio.NewSession(servers, zkio.WithSessionTimeout(limit), bound())
	if err != nil {
		t.Fatalf("session timeout %v: %v", limit, err)
	}
	s.Close()
}
