// Package ports reserves loopback TCP ports for test servers that stop and
// start again on the same port.
//
// A port the kernel picks (a listen on port 0) comes from its ephemeral
// range, the range it also draws from for the local end of every outgoing
// connection. Once a server on such a port stops, any connection made on the
// machine may take the port, and the server cannot start there again ("bind:
// address already in use"). Reserve picks ports below that range, which the
// kernel never hands out by itself, and marks each with a lock on a file, so
// that no other reservation, in this process or another, takes it until
// Release or the process's exit.
//
// A process that binds a port of that range by number, without this package,
// can still take one; the servers' helpers retry a start that fails so.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/gofrs/flock"
)

// A Reservation holds ports until Release. Its methods are safe for
// concurrent use.
type Reservation struct {
	ports []int

	mu    sync.Mutex
	locks []*flock.Flock // nil once released
}

// Reserve reserves n distinct loopback TCP ports, each free (nothing listens
// on it) when reserved, below the kernel's ephemeral range and held by no
// other reservation.
func Reserve(n int) (*Reservation, error) {
	if n < 1 {
		return nil, fmt.Errorf("ports: reserving %d ports: need at least one", n)
	}
	dir := lockDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ports: lock directory: %w", err)
	}
	first, end := candidates()
	span := end - first
	r := &Reservation{}
	// Listeners held until every port is picked prove each free at once.
	var probes []net.Listener
	defer func() {
		for _, ln := range probes {
			_ = ln.Close()
		}
	}()
	start := rand.IntN(span)
	for i := 0; i < span && len(r.ports) < n; i++ {
		port := first + (start+i)%span
		lock := flock.New(filepath.Join(dir, strconv.Itoa(port)))
		ok, err := lock.TryLock()
		if err != nil {
			r.Release()
			return nil, fmt.Errorf("ports: %w", err)
		}
		if !ok {
			continue // another reservation holds it
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			_ = lock.Close() // in use by something else
			continue
		}
		probes = append(probes, ln)
		r.ports = append(r.ports, port)
		r.locks = append(r.locks, lock)
	}
	if len(r.ports) < n {
		r.Release()
		return nil, fmt.Errorf("ports: only %d of %d free ports in [%d, %d)", len(r.ports), n, first, end)
	}
	return r, nil
}

// Ports returns the reserved ports, in the order reserved. The slice is a
// fresh copy.
func (r *Reservation) Ports() []int { return append([]int(nil), r.ports...) }

// Release gives the ports back for other reservations. The caller must have
// stopped whatever listened on them. Releasing again does nothing.
func (r *Reservation) Release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.locks {
		_ = f.Close() // unlocks
	}
	r.locks = nil
}

// Lock files stay in place after Release: removing one could let two
// reservations lock different files of the same name.
func lockDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("disco-ports-%d", os.Getuid()))
}

// defaultEphemeralStart is Linux's default start of the ephemeral range; it
// is also below macOS's and the BSDs'.
const defaultEphemeralStart = 32768

// candidates returns the ports Reserve picks from, [first, end): the upper
// half of the ports below the ephemeral range.
func candidates() (first, end int) {
	end = EphemeralStart()
	return end / 2, end
}

// EphemeralStart returns the first port of the kernel's ephemeral range (on
// Linux, from /proc/sys/net/ipv4/ip_local_port_range; elsewhere 32768, below
// the range of macOS and the BSDs). Every port Reserve hands out is below it.
func EphemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralStart
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return defaultEphemeralStart
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < 2048 {
		return defaultEphemeralStart
	}
	return lo
}
