// Package etcdtest runs a test binary's etcd server in a child process, so
// that the tests' own process holds only client goroutines and goleak sees
// exactly what the code under test leaves behind.
//
// A test package calls Main from TestMain:
//
//	func TestMain(m *testing.M) { etcdtest.Main(m) }
//
// and reaches the server through Endpoints. When ETCD_ENDPOINTS is set, that
// cluster is used and no server is started.
package etcdtest

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio/embedded"
	"github.com/ahrtr/disco/internal/faultproxy"
)

// childEnv marks the child process that serves etcd for its parent.
const childEnv = "DISCO_ETCDTEST_SERVE"

var endpoints []string

// Endpoints returns the client endpoints of the server Main started.
func Endpoints() []string { return append([]string(nil), endpoints...) }

// NewClient returns a client of the server Main started, closed when t
// ends.
func NewClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := embedded.NewClient(Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// NewProxiedClient returns a client of the server Main started through a
// fault proxy of its own (to cut the client off, delay or pause it), both
// closed when t ends.
func NewProxiedClient(t testing.TB) (*clientv3.Client, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	px, err := faultproxy.Listen("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	cli, err := embedded.NewClient([]string{"http://" + px.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, px
}

// Main runs the tests of m against an etcd server, then checks that no
// goroutine outlived them, and exits. In the child process it serves etcd
// instead, until the parent goes away.
func Main(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		serve()
		return
	}
	stop := func() error { return nil }
	if endpoints = embedded.EndpointsFromEnv(); len(endpoints) == 0 {
		var err error
		if endpoints, stop, err = startChild(); err != nil {
			fmt.Fprintln(os.Stderr, "etcdtest:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest: stop server:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "etcdtest: goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serve starts an embedded server, prints its endpoints on one line, and
// stops it when standard input closes (the parent exited or asked).
func serve() {
	srv, err := embedded.Start(embedded.WithUnsafeNoFsync())
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("endpoints:", strings.Join(srv.Endpoints(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Close()
	os.Exit(0)
}

func startChild() ([]string, func() error, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start server process: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	stop := func() error {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("server process did not stop within 30s")
		}
	}
	select {
	case l := <-line:
		eps, ok := strings.CutPrefix(l, "endpoints: ")
		if !ok {
			_ = stop()
			return nil, nil, fmt.Errorf("server process: %s", l)
		}
		return strings.Split(eps, ","), stop, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, nil, fmt.Errorf("server process did not start within 30s")
	}
}
