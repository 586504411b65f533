package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/ahrtr/disco/etcdio"
	"github.com/ahrtr/disco/etcdio/embedded"
)

// The tests build the disco binary once and run it as a process against
// one etcd server (or the cluster ETCD_ENDPOINTS names). The server is
// etcd embedded in another process, 'disco etcd', so that this process
// holds only client goroutines and goleak sees what the tests leave.
var (
	discoBin  string
	endpoints []string
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "disco-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	discoBin = filepath.Join(dir, "disco")
	if out, err := exec.Command("go", "build", "-ldflags=-s -w", "-o", discoBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	if endpoints = embedded.EndpointsFromEnv(); len(endpoints) == 0 {
		eps, stop, err := startServer(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer stop()
		endpoints = eps
	}
	return m.Run()
}

// startServer runs 'disco etcd' on free ports with its data under dir and
// returns its endpoints once it serves, and a stop that ends it.
func startServer(dir string) ([]string, func(), error) {
	cmd := exec.Command(discoBin, "etcd", "--client-port=0", "--peer-port=0", "--unsafe-no-fsync",
		"--data-dir", filepath.Join(dir, "etcd"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // should the tests crash
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	ep, ok := strings.CutPrefix(strings.TrimSpace(line), "export "+embedded.EnvEndpoints+"=")
	if err != nil || !ok {
		stop()
		return nil, nil, fmt.Errorf("disco etcd printed %q: %v", line, err)
	}
	return []string{ep}, stop, nil
}

// noLeaks fails t if goroutines started during the test outlive it. Call
// it first, so that its check runs after every other cleanup.
func noLeaks(t *testing.T) {
	t.Helper()
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// newClient returns a client of the test server, closed when t ends.
func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := embedded.NewClient(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// testCtx returns a context that ends when t does or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nameOf returns a primitive name no other test uses; an rwlock's epoch key
// on it is removed when t ends.
func nameOf(t *testing.T) string {
	name := "/disco-cli-test/" + t.Name()
	t.Cleanup(func() {
		cli, err := embedded.NewClient(endpoints)
		if err != nil {
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = cli.Delete(ctx, name+etcdio.EpochSuffix)
	})
	return name
}

// output is a process's stdout or stderr, safe to read while it grows.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced at each write
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.changed)
	o.changed = make(chan struct{})
	return o.buf.Write(b)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// await returns the output once it contains want, or fails t after d.
func (o *output) await(t *testing.T, want string, d time.Duration) string {
	t.Helper()
	s, ok := o.within(want, d, nil)
	if !ok {
		t.Fatalf("no %q in output within %v; output:\n%s", want, d, s)
	}
	return s
}

// within returns the output once it contains want (ok), or what it is
// when d passes or ended is closed (nil: never).
func (o *output) within(want string, d time.Duration, ended <-chan struct{}) (s string, ok bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		s, changed := o.buf.String(), o.changed
		o.mu.Unlock()
		if strings.Contains(s, want) {
			return s, true
		}
		select {
		case <-changed:
		case <-ended:
			s = o.String() // the writer has copied everything: a last look
			return s, strings.Contains(s, want)
		case <-deadline.C:
			return s, false
		}
	}
}

// proc is a running disco process.
type proc struct {
	cmd            *exec.Cmd
	stdin          io.WriteCloser
	stdout, stderr *output
	done           chan struct{}
	code           int
}

// startDisco runs disco with args and ETCD_ENDPOINTS pointing at the test
// server. The process is killed, if still running, when t ends.
func startDisco(t *testing.T, args ...string) *proc {
	t.Helper()
	return startProc(t, discoBin, args...)
}

// startProc is startDisco for the program bin (a shell that execs disco).
func startProc(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: newOutput(), stderr: newOutput(), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), embedded.EnvEndpoints+"="+strings.Join(endpoints, ","))
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the exit status, failing t if the process runs on for d.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("disco %v still running after %v; stdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], d, p.stdout, p.stderr)
		return 0
	}
}

// signal sends sig to the disco process.
func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// runDisco runs disco to its end within d and returns its status and output.
func runDisco(t *testing.T, d time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	p := startDisco(t, args...)
	p.stdin.Close()
	code = p.wait(t, d)
	return code, p.stdout.String(), p.stderr.String()
}

// awaitKeys waits until n keys are under name+"/" and returns them in
// creation order.
func awaitKeys(t *testing.T, cli *clientv3.Client, name string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := cli.Get(testCtx(t, 5*time.Second), name+"/", clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == n {
			keys := make([]string, n)
			for i, kv := range resp.Kvs {
				keys[i] = string(kv.Key)
			}
			return keys
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys under %s/, want %d", len(resp.Kvs), name, n)
		}
		// Wait for the next change under the prefix rather than spin.
		wctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		<-cli.Watch(wctx, name+"/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		cancel()
	}
}

// awaitRunning returns o (p's stdout or stderr) once it contains want,
// failing t if p ends first or d passes.
func (p *proc) awaitRunning(t *testing.T, o *output, want string, d time.Duration) string {
	t.Helper()
	s, ok := o.within(want, d, p.done)
	switch {
	case ok:
		return s
	case isClosed(p.done):
		t.Fatalf("disco %v ended (exit %d) before printing %q; stdout:\n%s\nstderr:\n%s", p.cmd.Args[1:], p.code, want, p.stdout, p.stderr)
	default:
		t.Fatalf("no %q in output within %v; stdout:\n%s\nstderr:\n%s", want, d, p.stdout, p.stderr)
	}
	return s
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
