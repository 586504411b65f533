package testserver_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/ahrtr/disco/internal/ports"
	"github.com/ahrtr/disco/internal/testserver"
)

// belowKernelRange fails t unless addr's port is outside the kernel's
// ephemeral range, where any outgoing connection could take it while the
// server is stopped, and the server could not restart on it.
func belowKernelRange(t *testing.T, addr string) {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := strconv.Atoi(port); err != nil || p >= ports.EphemeralStart() {
		t.Errorf("server at %s: port in the kernel's ephemeral range (from %d)", addr, ports.EphemeralStart())
	}
}

func TestRedisRestartsOnReservedPort(t *testing.T) {
	r := testserver.StartRedis(t)
	belowKernelRange(t, r.Addr)
	r.Stop()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
}

func TestZooKeeperRestartsOnReservedPort(t *testing.T) {
	zk := testserver.StartZooKeeper(t)
	belowKernelRange(t, zk.Addr)
	zk.Stop()
	zk.Restart(t)
}

func TestReservePorts(t *testing.T) {
	ps, err := testserver.ReservePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		belowKernelRange(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
}
