package story

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/ahrtr/disco/etcdio/embedded"
)

// ServerMain is the whole main of a resource server: it listens on the
// address given by -addr (default addr) and calls run until an interrupt.
func ServerMain(addr string, run func(ctx context.Context, ln net.Listener, out io.Writer) error) {
	listen := flag.String("addr", addr, "address to listen on")
	flag.Parse()
	Main("resource", func(ctx context.Context) error {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return err
		}
		return run(ctx, ln, os.Stdout)
	})
}

// ClientMain is the whole main of a story told to a resource: the resource
// is the address given by -resource (usage describes it), or, by default,
// one that run starts in-process. It is RunMain otherwise, with a note when
// a fresh embedded etcd meets a resource that has seen other tokens.
func ClientMain[O any](name, usage string, run func(ctx context.Context, out io.Writer, endpoints []string, resource string) (O, error)) {
	resource := flag.String("resource", "", usage)
	flag.Parse()
	Main(name, func(ctx context.Context) error {
		return WithEtcd(ctx, os.Stdout, ShowAddress, func(ctx context.Context, etcd Etcd) error {
			if etcd.Embedded && *resource != "" {
				// Tokens are comparable only within one cluster.
				fmt.Println("note: this etcd is new, its tokens start low: restart the resource before the next run")
			}
			_, err := run(ctx, os.Stdout, etcd.Endpoints, *resource)
			return err
		})
	})
}

// ForeignTokens explains why a resource rejected an owner's very first write
// as stale (its answer is detail): it has seen higher tokens, from another
// etcd cluster, and tokens are comparable only within one cluster.
func ForeignTokens(detail string) error {
	return fmt.Errorf("A's first write was rejected as stale (%s): the resource has seen higher tokens, from another etcd cluster "+
		"(an earlier run with its own embedded etcd?). Tokens are comparable only within one cluster: restart the resource, or use one cluster with %s",
		detail, embedded.EnvEndpoints)
}

// Logf returns a logger that writes each line to out, after the time.
func Logf(out io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(out, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
}

// Serve runs serve in the background until it returns or ctx ends. Once ctx
// ends it calls stop, waits for serve, says "resource: stopped" on out and
// returns their errors; serve must return nil after stop.
func Serve(ctx context.Context, out io.Writer, serve, stop func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	err := stop()
	err = errors.Join(err, <-errc)
	fmt.Fprintln(out, "resource: stopped")
	return err
}

// StartInProcess serves on a free loopback port in the background, for a
// client that was not given the address of a running resource. It returns
// the address and a func that calls stop and waits for serve to return.
func StartInProcess(serve func(net.Listener) error, stop func()) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("starting the in-process resource: %w", err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = serve(ln) // returns after stop
	}()
	return ln.Addr().String(), func() {
		stop()
		<-served
	}, nil
}
