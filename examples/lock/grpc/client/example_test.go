package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/etcdio/etcdtest"
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
	for _, want := range []string{"Lost", "FailedPrecondition", "ended as promised"} {
		if !strings.Contains(story, want) {
			t.Errorf("story does not mention %q", want)
		}
	}
}

// TestZombieInProcess is `go run ./examples/lock/grpc/client`.
func TestZombieInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	o, err := run(ctx, &out, etcdtest.Endpoints(), "")
	t.Logf("story:\n%s", out.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkOutcome(t, o, out.String())
}

// TestZombieSeparateResource is the two-terminal way, with -resource, and
// looks at the server's guard and its log from the outside: both
// interceptors admitted and rejected what they should.
func TestZombieSeparateResource(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
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

	var out bytes.Buffer
	o, err := run(ctx, &out, etcdtest.Endpoints(), ln.Addr().String())
	t.Logf("story:\n%s", out.String())
	srv.Stop()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	checkOutcome(t, o, out.String())
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
