package main

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/etcdio/etcdtest"
	"github.com/ahrtr/disco/examples/internal/storytest"
	"github.com/ahrtr/disco/examples/lock/grpc/store"
	"github.com/ahrtr/disco/fencing/guard"
)

// TestMain serves etcd from a child process (or uses ETCD_ENDPOINTS), so
// goleak sees only this process's own goroutines.
func TestMain(m *testing.M) { etcdtest.Main(m) }

func checkOutcome(t *testing.T, o outcome, story string) {
	t.Helper()
	if o.TokenB <= o.TokenA {
		t.Errorf("B's token %d not above A's %d", o.TokenB, o.TokenA)
	}
	for what, err := range map[string]error{"unary": o.ZombieUnary, "stream": o.ZombieStream} {
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "stale") {
			t.Errorf("zombie %s write: %v, want FailedPrecondition (stale)", what, err)
		}
	}
	if o.Final != valueB {
		t.Errorf("final value %q, want B's %q", o.Final, valueB)
	}
	storytest.Mentions(t, "story", story, "Lost", "FailedPrecondition", "ended as promised")
}

// TestZombieInProcess is `go run ./examples/lock/grpc/client`.
func TestZombieInProcess(t *testing.T) {
	storytest.NoLeaks(t)
	o, story := storytest.TellWith(t, run, "")
	checkOutcome(t, o, story)
}

// TestZombieSeparateResource is the two-terminal way, with -resource, and
// looks at the server's guard and its log from the outside: both
// interceptors admitted and rejected what they should.
func TestZombieSeparateResource(t *testing.T) {
	storytest.NoLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := guard.New()
	var mu sync.Mutex
	var calls []string
	srv := store.NewServer(g, func(f string, args ...any) {
		// "/disco.examples.lock.KV/Write token=2 -> OK (mark 2)": keep "Write 2 OK".
		fs := strings.Fields(fmt.Sprintf(f, args...))
		method := fs[0][strings.LastIndex(fs[0], "/")+1:]
		mu.Lock()
		calls = append(calls, method+" "+strings.TrimPrefix(fs[1], "token=")+" "+fs[3])
		mu.Unlock()
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	stop := sync.OnceFunc(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	defer stop() // if the story fails

	o, story := storytest.TellWith(t, run, ln.Addr().String())
	stop()
	checkOutcome(t, o, story)
	if g.Mark() != o.TokenB {
		t.Errorf("guard mark %d, want B's token %d", g.Mark(), o.TokenB)
	}
	a, b := o.TokenA, o.TokenB
	want := fmt.Sprintf("Write %d OK|WriteStream %d OK|Write %d FailedPrecondition|WriteStream %d FailedPrecondition|Get %d OK", a, b, a, a, b)
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(calls, "|"); got != want {
		t.Errorf("server saw\n %s\nwant\n %s", got, want)
	}
}
