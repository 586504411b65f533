// Command resource serves the HTTP resource of the lock examples: a tiny
// key/value store (package examples/lock/http/store) whose writes pass
// through a fencing guard, which rejects stale tokens with 409, missing ones
// with 428 and malformed ones with 400.
//
// Run it in one terminal and the client in another:
//
//	go run ./examples/lock/http/resource                 # listens on 127.0.0.1:8080
//	go run ./examples/lock/http/client -resource http://127.0.0.1:8080
//
// The guard's mark lives only as long as this process, and tokens are etcd
// revisions, comparable only within one etcd cluster. A client run with its
// own embedded etcd starts a new cluster whose tokens start low again, so
// restart the resource before each such run, or point every client run at
// one cluster with ETCD_ENDPOINTS.
//
// Try it by hand as well:
//
//	curl -i -X PUT -H 'Fencing-Token: 7' -d hello http://127.0.0.1:8080/kv/doc   # 204
//	curl -i -X PUT -H 'Fencing-Token: 5' -d stale http://127.0.0.1:8080/kv/doc   # 409
//	curl -i -X PUT -d none http://127.0.0.1:8080/kv/doc                          # 428
//	curl http://127.0.0.1:8080/kv/doc                                            # hello
//	curl http://127.0.0.1:8080/metrics   # disco_guard_admitted_total, disco_guard_rejected_total{reason}, disco_guard_mark, ...
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ahrtr/disco/examples/internal/story"
	"github.com/ahrtr/disco/examples/lock/http/store"
	"github.com/ahrtr/disco/fencing/guard"
)

func main() { story.ServerMain("127.0.0.1:8080", run) }

// run serves the store on ln until ctx ends, logging each request to out.
func run(ctx context.Context, ln net.Listener, out io.Writer) error {
	// This resource persists nothing, so its guard starts at mark 0. A real
	// resource stores the mark durably with its data and restores it here
	// with guard.WithInitialMark(persisted); otherwise a restart forgets every
	// token it has seen and lets a zombie write in again.
	//
	// The guard reports to a registry of this resource's own, served on
	// /metrics: requests admitted, rejected by reason, Admit's wait, the mark.
	reg := prometheus.NewRegistry()
	m, err := guard.NewMetrics(reg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", store.New().Handler(guard.New(guard.WithMetrics(m)), story.Logf(out)))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "resource: key/value store on http://%s (PUT /kv/{key} needs a Fencing-Token header; GET /kv/{key}; GET /metrics)\n", ln.Addr())
	serve := func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
	shutdown := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}
	return story.Serve(ctx, out, serve, shutdown)
}
