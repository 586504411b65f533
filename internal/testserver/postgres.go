package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PostgresInstall is the command that installs PostgreSQL's server binaries.
const PostgresInstall = "apt-get install -y postgresql"

// postgresBin returns the bin directory of the newest PostgreSQL installed
// under /usr/lib/postgresql, or "".
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if FirstExisting(filepath.Join(d, "initdb")) != "" && FirstExisting(filepath.Join(d, "postgres")) != "" {
			return d
		}
	}
	return ""
}

// Postgres starts a throwaway PostgreSQL server for t and returns a URL
// for it (user postgres, database postgres, no password, loopback only),
// usable with pgx's stdlib driver. The server's data lives in a temporary
// directory; both are gone when t ends. It runs as user nobody when the
// tests run as root (PostgreSQL refuses root). Without the binaries, t is
// skipped (or failed, see Missing).
func Postgres(t testing.TB) string {
	t.Helper()
	return PostgresServerFor(t).URL
}

// PostgresServerFor is Postgres, returning the server: for a test that
// reads its log as well (Log).
func PostgresServerFor(t testing.TB) *PostgresServer {
	t.Helper()
	if postgresBin() == "" {
		Missing(t, "PostgreSQL (initdb and postgres under /usr/lib/postgresql/*/bin)", PostgresInstall)
	}
	srv, err := LaunchPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// PostgresInstalled reports whether PostgreSQL's server binaries are
// installed (see PostgresInstall).
func PostgresInstalled() bool { return postgresBin() != "" }

// PostgresServer is a PostgreSQL server started by LaunchPostgres.
type PostgresServer struct {
	URL  string // as Postgres returns
	stop func()
	logs *lockedBuffer
}

// Log returns what the server has written to its log (its stderr) so far:
// the lines of the errors it reported to clients among them (ERROR:), at
// PostgreSQL's default log_min_messages. The lines reach it a little after
// the server wrote them.
func (p *PostgresServer) Log() string { return p.logs.String() }

// Stop stops the server (a fast shutdown, killed after 15 s) and removes its
// directory; calling it again is harmless.
func (p *PostgresServer) Stop() {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
}

// LaunchPostgres is Postgres for programs (bench): it starts a server in a
// new temporary directory and returns it; the caller stops it.
func LaunchPostgres() (*PostgresServer, error) {
	bin := postgresBin()
	if bin == "" {
		return nil, fmt.Errorf("PostgreSQL is not installed; install it with: %s", PostgresInstall)
	}
	dir, data, cred, err := initPostgres(bin)
	if err != nil {
		return nil, err
	}
	// The port is reserved (no other test server or kernel-picked port
	// takes it), but a process that binds ports by number may hold it: try
	// again with a fresh one.
	for attempt := 1; ; attempt++ {
		port, err := ReservePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		addr, stop, logs, err := startPostgres(bin, dir, data, port, cred)
		if err == nil {
			return &PostgresServer{
				URL:  fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr),
				stop: func() { stop(); _ = os.RemoveAll(dir) },
				logs: logs,
			}, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
}

// initPostgres makes a data directory for a new server in a new temporary
// directory, dir, owned by the user the server runs as; the caller removes
// dir.
func initPostgres(bin string) (dir, data string, cred *syscall.Credential, err error) {
	// Under the system's temporary directory, not a test's: the server's
	// socket path must stay short, and user nobody must reach it.
	dir, err = os.MkdirTemp("", "disco-pg-")
	if err != nil {
		return "", "", nil, err
	}
	cred, err = pgCredential(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", "", nil, fmt.Errorf("postgres: %w", err)
	}
	data = filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", "", nil, fmt.Errorf("postgres: initdb: %w\n%s", err, out)
	}
	return dir, data, cred, nil
}

// errPortTaken says the server could not bind its port.
var errPortTaken = errors.New("port taken")

// startPostgres starts the server of data on port and waits until it
// accepts sessions; stop stops it, and logs has what it writes to its log.
// On an error the server is stopped.
func startPostgres(bin, dir, data string, port int, cred *syscall.Credential) (addr string, stop func(), logs *lockedBuffer, err error) {
	logs = &lockedBuffer{} // written by exec's copying goroutines while we wait
	srv := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-h", "127.0.0.1", "-k", dir, "-c", "fsync=off", "-c", "full_page_writes=off")
	srv.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	srv.Dir = dir
	srv.Stdout, srv.Stderr = logs, logs
	if err := srv.Start(); err != nil {
		return "", nil, nil, fmt.Errorf("postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = srv.Wait(); close(exited) }()
	stop = func() {
		_ = srv.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		// The server accepts connections once it is ready; pg_isready would
		// say the same, one process later.
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			if pgReady(bin, port, cred) {
				return addr, stop, logs, nil
			}
		}
		select {
		case <-exited:
			if strings.Contains(logs.String(), "could not bind") {
				return "", nil, nil, fmt.Errorf("postgres: %s: %w:\n%s", addr, errPortTaken, logs.String())
			}
			return "", nil, nil, fmt.Errorf("postgres exited at start:\n%s", logs.String())
		case <-ctx.Done():
			stop()
			return "", nil, nil, fmt.Errorf("postgres not ready within 30s:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pgReady asks pg_isready (when installed) whether the server accepts
// sessions, not just connections.
func pgReady(bin string, port int, cred *syscall.Credential) bool {
	p := filepath.Join(bin, "pg_isready")
	if FirstExisting(p) == "" {
		return true
	}
	cmd := exec.Command(p, "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Run() == nil
}

// pgCredential returns the user to run PostgreSQL as: nil (this process's)
// unless it is root, then nobody, who is given dir.
func pgCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root and no user nobody to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
