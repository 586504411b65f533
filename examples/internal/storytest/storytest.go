// Package storytest is the test scaffolding the examples share: telling a
// story against etcdtest's cluster with a deadline and a goroutine-leak
// check, looking for phrases in what was told, and serving a resource on a
// loopback port. Each example's test still checks its own story's outcome.
package storytest

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio/etcdtest"
)

// NoLeaks fails t if, once it and its deferred calls have ended, a goroutine
// started from now on is still running.
func NoLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// Tell calls tell against etcdtest's cluster (TestMain must run
// etcdtest.Main) with a 30-second limit, logs what it told, and stops the
// test if it failed. It returns the outcome and the story as told.
func Tell[O any](t *testing.T, tell func(ctx context.Context, out io.Writer, endpoints []string) (O, error)) (O, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	o, err := tell(ctx, &out, etcdtest.Endpoints())
	t.Logf("story:\n%s", out.String())
	if err != nil {
		t.Fatalf("story: %v", err)
	}
	return o, out.String()
}

// TellWith is Tell for a story that takes one more argument, such as a
// resource's address or a database file.
func TellWith[O, A any](t *testing.T, tell func(ctx context.Context, out io.Writer, endpoints []string, arg A) (O, error), arg A) (O, string) {
	t.Helper()
	return Tell(t, func(ctx context.Context, out io.Writer, endpoints []string) (O, error) {
		return tell(ctx, out, endpoints, arg)
	})
}

// Run is Tell for a story's run, which reports only whether it ended as
// promised.
func Run(t *testing.T, run func(ctx context.Context, out io.Writer, endpoints []string) error) string {
	t.Helper()
	_, story := Tell(t, func(ctx context.Context, out io.Writer, endpoints []string) (struct{}, error) {
		return struct{}{}, run(ctx, out, endpoints)
	})
	return story
}

// Mentions reports an error for each of wants that text (named what, such
// as "story" or "log") lacks.
func Mentions(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s does not mention %q:\n%s", what, want, text)
		}
	}
}

// Serve calls run, a resource's run, on a fresh loopback listener in the
// background. It returns the address, the resource's log, and stop, which
// ends run and returns its error; the test's end calls it too.
func Serve(t *testing.T, run func(ctx context.Context, ln net.Listener, out io.Writer) error) (addr string, log *SyncBuffer, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	log = new(SyncBuffer)
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, log) }()
	stop = sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() { _ = stop() }) // if the test stops early
	return ln.Addr().String(), log, stop
}

// SyncBuffer is a bytes.Buffer safe for a server's and a test's goroutines.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
