// Command resource serves the gRPC resource of the lock examples: a tiny
// key/value service (packages examples/lock/grpc/pb and
// examples/lock/grpc/store) behind a fencing guard's unary and stream
// interceptors, which reject stale tokens with codes.FailedPrecondition and
// missing or malformed ones with codes.InvalidArgument. Messages travel as
// JSON (content subtype "json"); no protoc is involved.
//
// Run it in one terminal and the client in another:
//
//	go run ./examples/lock/grpc/resource                 # listens on 127.0.0.1:9090
//	go run ./examples/lock/grpc/client -resource 127.0.0.1:9090
//
// The guard's mark lives only as long as this process, and tokens are etcd
// revisions, comparable only within one etcd cluster. A client run with its
// own embedded etcd starts a new cluster whose tokens start low again, so
// restart the resource before each such run, or point every client run at
// one cluster with ETCD_ENDPOINTS.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/examples/lock/grpc/store"
	"github.com/ahrtr/disco/fencing/guard"
)

func main() { story.ServerMain("127.0.0.1:9090", run) }

// run serves the store on ln until ctx ends, logging each call to out.
func run(ctx context.Context, ln net.Listener, out io.Writer) error {
	// This resource persists nothing, so its guard starts at mark 0. A real
	// resource stores the mark durably with its data and restores it here
	// with guard.WithInitialMark(persisted); otherwise a restart forgets every
	// token it has seen and lets a zombie write in again.
	srv := store.NewServer(guard.New(), story.Logf(out))
	fmt.Fprintf(out, "resource: gRPC key/value service on %s (every call needs fencing-token metadata)\n", ln.Addr())
	serve := func() error { return srv.Serve(ln) } // nil after a stop
	stop := func() error {
		stopped := make(chan struct{})
		go func() {
			srv.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			srv.Stop() // streams still open: cut them
			<-stopped
		}
		return nil
	}
	return story.Serve(ctx, out, serve, stop)
}
