package testserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisInstall is the command that installs the Redis server the tests use.
const RedisInstall = "apt-get install redis-server"

// Redis is a real redis-server on a loopback port, with its own temporary
// directory, stopped when the test ends.
type Redis struct {
	// Addr is host:port of the server.
	Addr string
	// Dir is the server's working directory (its AOF lives there).
	Dir string

	bin  string
	args []string
	cmd  *exec.Cmd
}

// RedisOption changes how StartRedis runs the server.
type RedisOption func(*redisConfig)

type redisConfig struct{ aof bool }

// WithoutAOF runs the server with no persistence at all (appendonly no, no
// snapshots): a restart forgets every key.
func WithoutAOF() RedisOption { return func(c *redisConfig) { c.aof = false } }

// StartRedis starts redis-server on a reserved loopback port (ReservePorts)
// with a fresh directory, by default with appendonly yes, appendfsync always
// and no snapshots, and waits until it answers PING. It skips t (or fails it
// under DISCO_REQUIRE_SERVERS=1) when redis-server is not installed, and
// stops the server when t ends.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	if RedisBinary() == "" {
		Missing(t, "redis-server", RedisInstall)
	}
	r, err := LaunchRedis(t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// RedisBinary is the path of redis-server, or "" if it is not installed.
func RedisBinary() string {
	return LookPath("redis-server", "/usr/bin/redis-server", "/usr/local/bin/redis-server")
}

// LaunchRedis is StartRedis for programs (bench): it starts redis-server in
// dir and returns it; the caller stops it.
func LaunchRedis(dir string, opts ...RedisOption) (*Redis, error) {
	bin := RedisBinary()
	if bin == "" {
		return nil, fmt.Errorf("redis-server is not installed; install it with: %s", RedisInstall)
	}
	c := redisConfig{aof: true}
	for _, o := range opts {
		o(&c)
	}
	// The port is reserved (no other test server or kernel-picked port
	// takes it), but a process that binds ports by number may hold it: try
	// again with a fresh one.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var port int
		if port, err = ReservePort(); err != nil {
			return nil, fmt.Errorf("redis: reserving a port: %w", err)
		}
		r := &Redis{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, bin: bin}
		r.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", r.Dir,
			"--save", "", "--daemonize", "no", "--protected-mode", "no"}
		if c.aof {
			r.args = append(r.args, "--appendonly", "yes", "--appendfsync", "always")
		} else {
			r.args = append(r.args, "--appendonly", "no")
		}
		if err = r.start(); err == nil {
			return r, nil
		}
	}
	return nil, err
}

func (r *Redis) start() error {
	r.cmd = exec.Command(r.bin, r.args...)
	r.cmd.Dir = r.Dir
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("redis: start %s: %w", r.bin, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ping(r.Addr) {
		if time.Now().After(deadline) {
			r.Stop()
			return fmt.Errorf("redis: %s did not answer PING within 10s", r.Addr)
		}
		time.Sleep(10 * time.Millisecond) // polling interval while the server starts
	}
	return nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s); calling it again is
// harmless.
func (r *Redis) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	cmd := r.cmd
	r.cmd = nil
	_ = cmd.Process.Signal(os.Interrupt)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Running reports whether the server's process was started and not
// stopped or killed since.
func (r *Redis) Running() bool { return r.cmd != nil }

// Kill kills the server at once (SIGKILL), as a crash would: it writes
// nothing more. Restart brings it back from its append-only file.
func (r *Redis) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	cmd := r.cmd
	r.cmd = nil
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// Restart stops the server and starts it again on the same port and
// directory, so that it reloads its append-only file if it has one.
func (r *Redis) Restart() error {
	r.Stop()
	return r.start()
}

// ping reports whether a Redis server at addr answers PING.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}
