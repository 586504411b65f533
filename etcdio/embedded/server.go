package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/ahrtr/disco/internal/ports"
)

// Server is a running single-member etcd cluster. Its methods are safe for
// concurrent use.
type Server struct {
	root    string
	spec    memberSpec
	etcd    *embed.Etcd
	ports   *ports.Reservation
	closeMu sync.Mutex
	closed  bool
	err     error
}

// Start starts a single-member etcd cluster on reserved loopback ports (see
// the package documentation), with its data in a new temporary directory,
// and returns once the member is ready to serve requests (normally well
// under a second; at most the start timeout).
// On error nothing is left running and the directory has been removed.
// Call Close when done.
func Start(opts ...Option) (*Server, error) {
	o := buildOptions(opts)
	root, err := os.MkdirTemp("", "disco-etcd-")
	if err != nil {
		return nil, fmt.Errorf("embedded: creating data directory: %w", err)
	}
	for attempt := 1; ; attempt++ {
		s, err := startServer(&o, root)
		if err == nil {
			return s, nil
		}
		if !isAddrInUse(err) || attempt == maxPortAttempts {
			_ = os.RemoveAll(root)
			return nil, err
		}
		// Somebody grabbed a port between picking and binding it. etcd may
		// have created its data directory already; start afresh.
		if rerr := os.RemoveAll(filepath.Join(root, "member")); rerr != nil {
			_ = os.RemoveAll(root)
			return nil, errors.Join(err, rerr)
		}
	}
}

func startServer(o *options, root string) (*Server, error) {
	reserved, err := ports.Reserve(3)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	p := reserved.Ports()
	spec := memberSpec{
		name:    "embedded",
		dir:     filepath.Join(root, "member"),
		client:  loopbackURL(p[0]),
		peer:    loopbackURL(p[1]),
		metrics: loopbackURL(p[2]),
		token:   filepath.Base(root),
	}
	spec.initialCluster = spec.name + "=" + spec.peer.String()
	e, err := o.startEtcd(spec)
	if err != nil {
		reserved.Release()
		return nil, err
	}
	ctx, cancel := o.startTimeoutContext()
	defer cancel()
	if err := waitReady(ctx, spec.name, e); err != nil {
		e.Close()
		reserved.Release()
		return nil, err
	}
	return &Server{root: root, spec: spec, etcd: e, ports: reserved}, nil
}

// Endpoints returns the client URLs to pass to clientv3.Config.Endpoints.
// The slice is a fresh copy.
func (s *Server) Endpoints() []string { return []string{s.ClientURL()} }

// ClientURL returns the member's client URL, "http://127.0.0.1:<port>".
func (s *Server) ClientURL() string { return s.spec.client.String() }

// MetricsURL returns the URL of the member's Prometheus metrics,
// "http://127.0.0.1:<port>/metrics". (The same listener also serves
// /health.) The numbers are process-wide; see the package documentation.
func (s *Server) MetricsURL() string { return s.spec.metrics.String() + "/metrics" }

// DataDir returns the member's data directory. It is removed by Close.
func (s *Server) DataDir() string { return s.spec.dir }

// Etcd returns the underlying embedded server, for what this package does
// not cover. Do not close it directly; use Close.
func (s *Server) Etcd() *embed.Etcd { return s.etcd }

// NewClient returns a client connected to this server that logs nothing.
// The caller closes it, preferably before closing the Server, whose graceful
// shutdown may otherwise wait a few seconds for the client's streams.
func (s *Server) NewClient() (*clientv3.Client, error) { return NewClient(s.Endpoints()) }

// Close stops the server, waits for it to shut down and removes its data
// directory. It is idempotent: later calls return the first call's result.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return s.err
	}
	s.closed = true
	s.etcd.Close()
	s.ports.Release()
	if err := os.RemoveAll(s.root); err != nil {
		s.err = fmt.Errorf("embedded: removing data directory: %w", err)
	}
	return s.err
}
