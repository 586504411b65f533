// Package apiserver runs a real kube-apiserver (Kubernetes 1.37) inside the
// current process, storing into disco's embedded etcd, for k8sio's tests
// and examples. It is k8s.io/kubernetes' own test server
// (cmd/kube-apiserver/app/testing.StartTestServer), with authorization
// that lets the loopback client do everything.
package apiserver

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"sync"
	"sync/atomic"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/ahrtr/disco/etcdio/embedded"
)

// Server is a kube-apiserver on an embedded etcd member.
type Server struct {
	etcd     *embedded.Server
	tearDown func()
	config   *rest.Config
}

var prefixes atomic.Int64

// Start starts etcd and the API server; tb receives the server's failures
// and its cleanups (Close runs them). Use StartProcess outside a test.
func Start(tb ktesting.TB) (*Server, error) {
	etcd, err := embedded.Start(embedded.WithUnsafeNoFsync())
	if err != nil {
		return nil, fmt.Errorf("apiserver: etcd: %w", err)
	}
	cfg := storagebackend.NewDefaultConfig(path.Join("/disco-k8sio", strconv.FormatInt(prefixes.Add(1), 10), "registry"), nil)
	cfg.Transport.ServerList = etcd.Endpoints()
	opts := kubeapiservertesting.NewDefaultTestServerOptions()
	opts.DisableInvariantChecks = true
	ts, err := kubeapiservertesting.StartTestServer(tb, opts, []string{"--authorization-mode=AlwaysAllow"}, cfg)
	if err != nil {
		etcd.Close()
		return nil, fmt.Errorf("apiserver: kube-apiserver: %w", err)
	}
	return &Server{etcd: etcd, tearDown: ts.TearDownFn, config: ts.ClientConfig}, nil
}

// Config returns a new copy of the loopback client's configuration.
func (s *Server) Config() *rest.Config { return rest.CopyConfig(s.config) }

// Client returns a new clientset on its own connection; wrap, if not nil,
// wraps its transport.
func (s *Server) Client(wrap func(http.RoundTripper) http.RoundTripper) (*kubernetes.Clientset, error) {
	cfg := s.Config()
	if wrap != nil {
		cfg.Wrap(wrap)
	}
	return kubernetes.NewForConfig(cfg)
}

// Close stops the API server, then etcd.
func (s *Server) Close() error {
	s.tearDown()
	return s.etcd.Close()
}

// Quiet discards the API server's logs (klog's), which are many.
func Quiet() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
}

// StartProcess is Start for a program: the server's logs and failures go
// to standard error.
func StartProcess() (srv *Server, stop func(), err error) {
	tb := &processTB{}
	defer func() {
		if r := recover(); r != nil {
			tb.runCleanups()
			srv, stop, err = nil, nil, fmt.Errorf("apiserver: %v", r)
		}
	}()
	srv, err = Start(tb)
	if err != nil {
		tb.runCleanups()
		return nil, nil, err
	}
	return srv, func() { srv.Close(); tb.runCleanups() }, nil
}

// processTB is the testing.TB StartTestServer needs, for a program.
type processTB struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	skipped  bool
}

func (p *processTB) runCleanups() {
	p.mu.Lock()
	cs := p.cleanups
	p.cleanups = nil
	p.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

func (p *processTB) Attr(string, string) {}
func (p *processTB) Chdir(string)        {}
func (p *processTB) Helper()             {}
func (p *processTB) Name() string        { return "apiserver" }
func (p *processTB) Setenv(k, v string)  { os.Setenv(k, v) }
func (p *processTB) Log(args ...any)     {}
func (p *processTB) Logf(string, ...any) {}
func (p *processTB) Skipped() bool       { return p.skipped }
func (p *processTB) Fail()               { p.mu.Lock(); p.failed = true; p.mu.Unlock() }
func (p *processTB) Failed() bool        { p.mu.Lock(); defer p.mu.Unlock(); return p.failed }
func (p *processTB) FailNow()            { p.Fail(); panic("apiserver: FailNow") }
func (p *processTB) Error(args ...any)   { p.Fail(); fmt.Fprintln(os.Stderr, args...) }
func (p *processTB) Errorf(f string, a ...any) {
	p.Fail()
	fmt.Fprintf(os.Stderr, f+"\n", a...)
}
func (p *processTB) Fatal(args ...any)         { p.Error(args...); panic(fmt.Sprint(args...)) }
func (p *processTB) Fatalf(f string, a ...any) { p.Errorf(f, a...); panic(fmt.Sprintf(f, a...)) }
func (p *processTB) Skip(args ...any)          { p.skipped = true; panic(fmt.Sprint(args...)) }
func (p *processTB) Skipf(f string, a ...any)  { p.skipped = true; panic(fmt.Sprintf(f, a...)) }
func (p *processTB) SkipNow()                  { p.skipped = true; panic("skip") }
func (p *processTB) TempDir() string {
	d, err := os.MkdirTemp("", "apiserver")
	if err != nil {
		panic(err)
	}
	p.Cleanup(func() { os.RemoveAll(d) })
	return d
}
func (p *processTB) Cleanup(f func()) {
	p.mu.Lock()
	p.cleanups = append(p.cleanups, f)
	p.mu.Unlock()
}
