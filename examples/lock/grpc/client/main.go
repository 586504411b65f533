// Command client tells the zombie story over gRPC: two owners of a disco lock
// call a key/value service whose server runs a fencing guard's unary and
// stream interceptors, and the token travels in the fencing-token metadata,
// added by fencing.UnaryClientInterceptor and fencing.StreamClientInterceptor
// so that no call is ever made without one.
//
// Owner A locks and writes (a unary call). A is paused (a long GC pause, say)
// past its lease, so its hold ends; B locks with a higher token and writes
// over a bidirectional stream. A wakes up, still believing it holds the lock,
// and writes with its old token, on a unary call and on a stream: both fail
// with codes.FailedPrecondition, and the stored value stays B's.
//
// One command shows the whole story, with the server started in-process on
// a free loopback port:
//
//	go run ./examples/lock/grpc/client
//
// or, with the server in another terminal:
//
//	go run ./examples/lock/grpc/resource
//	go run ./examples/lock/grpc/client -resource 127.0.0.1:9090
//
// etcd is embedded by default; set ETCD_ENDPOINTS to use a real cluster. The
// program exits 0 only if the story ended as promised.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/examples/lock/grpc/pb"
	"github.com/ahrtr/disco/examples/lock/grpc/store"
	"github.com/ahrtr/disco/fencing"
	"github.com/ahrtr/disco/fencing/guard"
)

func main() {
	story.ClientMain("grpc client example",
		"address of a running examples/lock/grpc/resource, e.g. 127.0.0.1:9090 (default: start one in-process)", run)
}

// ttl is the lease time to live of both owners.
const ttl = 2 * time.Second

const (
	key        = "report"
	valueA     = "draft by A"
	valueB     = "final version by B"
	valueAlate = "late edit by A"
)

// outcome is what the story observed, for the test to check.
type outcome struct {
	TokenA, TokenB fencing.Token
	// ZombieUnary and ZombieStream are the server's answers to A's unary
	// and streaming writes after it woke up.
	ZombieUnary, ZombieStream error
	// Final is the stored value at the end.
	Final string
}

// run tells the story against the etcd cluster at endpoints and the gRPC
// server at addr, or at one it starts in-process if addr is empty. It
// returns an error unless the story ended as promised: both of A's late
// writes rejected with FailedPrecondition, the value B's.
func run(ctx context.Context, out io.Writer, endpoints []string, addr string) (outcome, error) {
	var o outcome
	say, step := story.Narrator(out)

	if addr == "" {
		a, stop, err := startResource()
		if err != nil {
			return o, err
		}
		defer stop()
		addr = a
		say("resource: gRPC key/value service started in-process at %s", addr)
	} else {
		say("resource: %s", addr)
	}

	// Each owner is its own process in real life, with its own etcd client
	// and its own gRPC connection. The third etcd client plays the world
	// around A.
	clients := story.NewClients(endpoints)
	defer clients.Close()
	clis, err := clients.NewN(3)
	if err != nil {
		return o, err
	}
	cliA, cliB, world := clis[0], clis[1], clis[2]
	prefix := story.Prefix("lock/grpc")

	// Each connection stamps every call and stream with its owner's current
	// token, read from a TokenSource, and refuses to call while it is 0.
	var tokenA, tokenB atomic.Int64
	connA, err := dial(addr, func() fencing.Token { return fencing.Token(tokenA.Load()) })
	if err != nil {
		return o, err
	}
	defer connA.Close()
	connB, err := dial(addr, func() fencing.Token { return fencing.Token(tokenB.Load()) })
	if err != nil {
		return o, err
	}
	defer connB.Close()
	kvA, kvB := pb.NewKVClient(connA), pb.NewKVClient(connB)

	// Step 1: A locks and writes.
	step("1. A takes the lock and writes")
	a, err := etcdio.NewLock(cliA, prefix, etcdio.WithTTL(ttl))
	if err != nil {
		return o, err
	}
	defer a.Close()
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	aEvents := a.Subscribe(subCtx)
	ga, err := a.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("A: lock: %w", err)
	}
	o.TokenA = ga.Token()
	tokenA.Store(int64(ga.Token()))
	say("   A holds the lock: fencing token %d (lease %x, TTL %v)", ga.Token(), ga.LeaseID, ga.TTL)
	reply, err := kvA.Write(ctx, &pb.WriteRequest{Key: key, Value: valueA})
	if status.Code(err) == codes.FailedPrecondition {
		return o, story.ForeignTokens(status.Convert(err).Message())
	}
	if err != nil {
		return o, fmt.Errorf("A's first write: %w", err)
	}
	say("   A: Write(%q) with fencing-token %d: OK, stored under token %d", valueA, ga.Token(), reply.Token)

	// Step 2: A is paused until its lease is gone.
	step("2. A is paused (say, a long GC pause) and its lease runs out")
	lost, err := story.Pause(ctx, world, "A", ga.LeaseID, aEvents)
	if err != nil {
		return o, err
	}
	say("   (simulated: another client revoked lease %x instead of waiting %v)", ga.LeaseID, ga.TTL)
	say("   A's Subscribe reports Lost for token %d: its hold is over", lost.Token)
	// A live client would now reset its TokenSource to 0 (tokenA.Store(0))
	// and stop calling. A paused process runs no code: when it wakes up its
	// memory still says token ga.Token(), so tokenA is left as it is.
	say("   a paused process sees nothing: when it wakes up its TokenSource still returns %d", tokenA.Load())

	// Step 3: B locks and writes, over a stream.
	step("3. B takes the lock and writes")
	b, err := etcdio.NewLock(cliB, prefix, etcdio.WithTTL(ttl))
	if err != nil {
		return o, err
	}
	defer b.Close()
	gb, err := b.Lock(ctx)
	if err != nil {
		return o, fmt.Errorf("B: lock: %w", err)
	}
	o.TokenB = gb.Token()
	if gb.Token() <= ga.Token() {
		return o, fmt.Errorf("B's token %d is not above A's %d", gb.Token(), ga.Token())
	}
	tokenB.Store(int64(gb.Token()))
	say("   B holds the lock: fencing token %d (higher than A's %d)", gb.Token(), ga.Token())
	replies, err := streamWrite(ctx, kvB, valueB)
	if err != nil {
		return o, fmt.Errorf("B's write was not accepted: %w", err)
	}
	say("   B: WriteStream(%q) with fencing-token %d: OK, stored under token %d", valueB, gb.Token(), replies[0].Token)

	// Step 4: A wakes up and writes with the token it remembers.
	step("4. A wakes up and writes with its old token %d", tokenA.Load())
	_, o.ZombieUnary = kvA.Write(ctx, &pb.WriteRequest{Key: key, Value: valueAlate})
	if err := wantStale("A's late Write", ga.Token(), o.ZombieUnary); err != nil {
		return o, err
	}
	say("   A: Write(%q) with fencing-token %d: %s", valueAlate, ga.Token(), status.Code(o.ZombieUnary))
	say("      %q", status.Convert(o.ZombieUnary).Message())
	_, o.ZombieStream = streamWrite(ctx, kvA, valueAlate)
	if err := wantStale("A's late WriteStream", ga.Token(), o.ZombieStream); err != nil {
		return o, err
	}
	say("   A: WriteStream(%q) with fencing-token %d: %s too", valueAlate, ga.Token(), status.Code(o.ZombieStream))

	// Step 5: the stored value is B's.
	step("5. Outcome")
	got, err := kvB.Get(ctx, &pb.GetRequest{Key: key})
	if err != nil {
		return o, fmt.Errorf("B: Get: %w", err)
	}
	o.Final = got.Value
	if o.Final != valueB {
		return o, fmt.Errorf("the resource holds %q, want B's %q", o.Final, valueB)
	}
	say("   B: Get(%q) with fencing-token %d: %q: B's write survived, A's late writes did not", key, gb.Token(), o.Final)
	if err := b.Unlock(ctx); err != nil {
		return o, fmt.Errorf("B: unlock: %w", err)
	}
	tokenB.Store(0) // no grant, no calls: B's connection now refuses to call
	say("   B unlocks. The story ended as promised.")
	return o, nil
}

// wantStale explains err unless it is the server's stale-token rejection.
func wantStale(what string, t fencing.Token, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s with old token %d was ACCEPTED: the fence failed", what, t)
	case status.Code(err) != codes.FailedPrecondition:
		return fmt.Errorf("%s failed for another reason: %w", what, err)
	case !strings.Contains(status.Convert(err).Message(), fencing.ErrTokenStale.Error()):
		// The client interceptor also answers FailedPrecondition, when it has
		// no token at all; this must be the server's verdict.
		return fmt.Errorf("%s was refused, but not as stale by the server: %w", what, err)
	}
	return nil
}

// dial connects to addr with the JSON codec and the fencing interceptors.
func dial(addr string, src fencing.TokenSource) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(pb.Codec)),
		grpc.WithUnaryInterceptor(fencing.UnaryClientInterceptor(src)),
		grpc.WithStreamInterceptor(fencing.StreamClientInterceptor(src)),
	)
}

// streamWrite writes values over one WriteStream and returns the replies.
// The token is stamped once, when the stream opens.
func streamWrite(ctx context.Context, kv *pb.KVClient, values ...string) ([]*pb.WriteReply, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream on every path
	st, err := kv.WriteStream(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range values {
		// A rejected stream shows up as io.EOF here, and as the real status
		// in Recv below.
		if err := st.Send(&pb.WriteRequest{Key: key, Value: v}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	if err := st.CloseSend(); err != nil {
		return nil, err
	}
	var replies []*pb.WriteReply
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		replies = append(replies, r)
	}
	if len(replies) != len(values) {
		return nil, fmt.Errorf("WriteStream: %d replies for %d writes", len(replies), len(values))
	}
	return replies, nil
}

// startResource serves a fresh store behind a fresh guard on a free loopback
// port, as examples/lock/grpc/resource does, and returns its address.
func startResource() (string, func(), error) {
	srv := store.NewServer(guard.New(), nil)
	return story.StartInProcess(srv.Serve, srv.Stop)
}
